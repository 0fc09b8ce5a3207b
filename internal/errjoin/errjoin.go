package errjoin

import "strings"

// Join returns an error that wraps the non-nil errs (errors.Is and
// errors.As see each), or nil when there are none. Its message is theirs,
// separated by "; ".
func Join(errs ...error) error {
	var kept []error
	for _, err := range errs {
		if err != nil {
			kept = append(kept, err)
		}
	}
	if len(kept) == 0 {
		return nil
	}
	return &joined{kept}
}

type joined struct{ errs []error }

func (j *joined) Error() string {
	msgs := make([]string, len(j.errs))
	for i, err := range j.errs {
		msgs[i] = strings.ReplaceAll(err.Error(), "\n", "; ")
	}
	return strings.Join(msgs, "; ")
}

func (j *joined) Unwrap() []error { return j.errs }
