package apidump

import "slices"

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
