package dblock

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxNameLen is the longest lock name, in bytes.
const MaxNameLen = 255

// MaxOwnerLen is the longest owner string, in bytes.
const MaxOwnerLen = 255

// MaxMetadataLen is the longest metadata text, in bytes.
const MaxMetadataLen = 1024

// ValidateName returns an error wrapping ErrInvalidName when name is empty,
// longer than MaxNameLen bytes, not valid UTF-8, or contains a NUL byte.
// Names always travel as bind parameters; validation is about clear errors
// and portable storage, not about SQL safety.
func ValidateName(name string) error {
	if err := validateText(name, MaxNameLen); err != "" {
		return fmt.Errorf("%w: %q: %s", ErrInvalidName, truncate(name), err)
	}
	return nil
}

// validateOwner applies the same rules as ValidateName to an owner string,
// returning an error wrapping ErrInvalidOption.
func validateOwner(owner string) error {
	if err := validateText(owner, MaxOwnerLen); err != "" {
		return fmt.Errorf("%w: owner %q: %s", ErrInvalidOption, truncate(owner), err)
	}
	return nil
}

// validateMetadata returns an error wrapping ErrInvalidOption when metadata
// is longer than MaxMetadataLen bytes, not valid UTF-8, or contains a NUL
// byte (which PostgreSQL and MariaDB refuse in text and SQLite would store
// silently). Empty metadata is valid: none is stored.
func validateMetadata(metadata string) error {
	if metadata == "" {
		return nil
	}
	if err := validateText(metadata, MaxMetadataLen); err != "" {
		return fmt.Errorf("%w: metadata %q: %s", ErrInvalidOption, truncate(metadata), err)
	}
	return nil
}

func validateText(s string, maxLen int) string {
	switch {
	case s == "":
		return "must not be empty"
	case len(s) > maxLen:
		return fmt.Sprintf("is %d bytes, longer than %d", len(s), maxLen)
	case !utf8.ValidString(s):
		return "is not valid UTF-8"
	case strings.IndexByte(s, 0) >= 0:
		return "contains a NUL byte"
	}
	return ""
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}
