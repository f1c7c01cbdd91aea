package envflag

// The checks a setting's value can be held to. Each command lists its
// settings' rules in one table beside its flags (Rule); Parse applies them
// once every source was read, before the command starts anything.

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/zfs-csi/zfs-csi/rpc"
)

// Check is what a setting's value must be. Allowed says it in the words of
// the error, after "must be"; Test looks at the parsed value (flag.Getter's
// Get: a string, a bool, a time.Duration, an int or int64, a []string for a
// List) and says why it is not allowed, nil when it is. A nil Test allows
// whatever the flag parses.
type Check struct {
	Allowed string
	Test    func(value any) error
}

// ErrNotAllowed is a Test's refusal that has nothing to add to Allowed.
var ErrNotAllowed = errors.New("not allowed")

// Rule is one flag's check.
type Rule struct {
	Flag string
	Check
}

// Any allows whatever the flag parses; allowed says what that is.
func Any(allowed string) Check { return Check{Allowed: allowed} }

// Boolean is a flag.BoolVar's check: the parser is all of it.
var Boolean = Any("true or false")

// PositiveDuration is a duration a ticker or a timeout is made of.
var PositiveDuration = Check{
	Allowed: "a duration above zero, such as 30s or 5m",
	Test: func(value any) error {
		if value.(time.Duration) <= 0 {
			return ErrNotAllowed
		}
		return nil
	},
}

// AtLeast is a whole number no smaller than least.
func AtLeast(least int64) Check {
	return Check{
		Allowed: fmt.Sprintf("a whole number of %d or more", least),
		Test: func(value any) error {
			var number int64
			switch value := value.(type) {
			case int:
				number = int64(value)
			case int64:
				number = value
			default:
				return fmt.Errorf("%T is not a whole number", value)
			}
			if number < least {
				return ErrNotAllowed
			}
			return nil
		},
	}
}

// OneOf is one of a few words.
func OneOf(words ...string) Check {
	allowed := strings.Join(words, ", ")
	if len(words) > 1 {
		allowed = strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
	}
	return Check{Allowed: allowed, Test: func(value any) error {
		if !slices.Contains(words, value.(string)) {
			return ErrNotAllowed
		}
		return nil
	}}
}

// NotEmpty is any string but "".
func NotEmpty(allowed string) Check {
	return Check{Allowed: allowed, Test: func(value any) error {
		if value.(string) == "" {
			return ErrNotAllowed
		}
		return nil
	}}
}

// LogLevel is a level the commands log at.
var LogLevel = Check{Allowed: "debug, info, warn or error", Test: func(value any) error {
	if _, err := ParseLogLevel(value.(string)); err != nil {
		return ErrNotAllowed
	}
	return nil
}}

// ParseLogLevel reads a log level: debug, info, warn or error (zerolog's
// names; its trace, fatal, panic and disabled are not the commands').
func ParseLogLevel(level string) (zerolog.Level, error) {
	parsed, err := zerolog.ParseLevel(level)
	if err != nil || level == "" || parsed < zerolog.DebugLevel || parsed > zerolog.ErrorLevel {
		return zerolog.NoLevel, fmt.Errorf("log level %q: use debug, info, warn or error", level)
	}
	return parsed, nil
}

// UnixEndpoint is a CSI endpoint the commands can serve or reach: a unix
// socket (rpc.SocketPath).
var UnixEndpoint = Check{Allowed: "unix:///ABSOLUTE/PATH", Test: func(value any) error {
	_, err := rpc.SocketPath(value.(string))
	return err
}}

// HostPort is an address to listen at or dial, with a port number (0
// listens at any free port).
var HostPort = Check{Allowed: "HOST:PORT with a port number", Test: func(value any) error {
	return CheckHostPort(value.(string))
}}

// CheckHostPort is HostPort's test, for addresses inside other values.
func CheckHostPort(address string) error {
	_, port, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("port %q is not a number from 0 to 65535", port)
	}
	return nil
}

// Directory is an existing directory.
var Directory = Check{Allowed: "an existing directory", Test: func(value any) error {
	info, err := os.Stat(value.(string))
	if err != nil {
		return err
	}
	if !info.IsDir() {
		return errors.New("not a directory")
	}
	return nil
}}

// File is an existing file that is not a directory.
var File = Check{Allowed: "an existing file", Test: func(value any) error {
	info, err := os.Stat(value.(string))
	if err != nil {
		return err
	}
	if info.IsDir() {
		return errors.New("a directory")
	}
	return nil
}}

// AbsolutePath is an absolute path other than /.
var AbsolutePath = Check{Allowed: "an absolute path other than /", Test: func(value any) error {
	if path := value.(string); !filepath.IsAbs(path) || filepath.Clean(path) == "/" {
		return ErrNotAllowed
	}
	return nil
}}

// Optional allows "" besides what check allows; empty says what "" means.
func Optional(check Check, empty string) Check {
	return Check{Allowed: check.Allowed + ", or empty for " + empty, Test: func(value any) error {
		if value.(string) == "" {
			return nil
		}
		return check.Test(value)
	}}
}

// Each holds every item of a List to check.
func Each(check Check) Check {
	return Check{Allowed: check.Allowed + " (each item)", Test: func(value any) error {
		for _, item := range value.([]string) {
			if err := check.Test(item); err != nil {
				return fmt.Errorf("%q: %w", item, err)
			}
		}
		return nil
	}}
}

// And is both checks, first's test first.
func And(first Check, then Check) Check {
	return Check{Allowed: first.Allowed + ", and " + then.Allowed, Test: func(value any) error {
		if err := first.Test(value); err != nil {
			return err
		}
		return then.Test(value)
	}}
}

// When holds the value to check only while on is true; condition says when
// (such as "with --kubernetes"), after check's Allowed.
func When(on *bool, condition string, check Check) Check {
	return Check{Allowed: check.Allowed + " " + condition, Test: func(value any) error {
		if !*on {
			return nil
		}
		return check.Test(value)
	}}
}
