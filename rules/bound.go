package rules

import (
	"fmt"
	"math"
	"unicode/utf8"
)

// The socket's callers are untrusted (ARCHITECTURE.md decision 13) and a
// request may carry megabytes in a name, an ID or a parameter. What a log
// line or an error message repeats of it is cut, so that no caller can
// flood the journal, or an orchestrator's events, through the daemon.
//
// MaxEchoedBytes bounds one caller-given string repeated in a log line
// or an error message: twice the longest ID the driver issues
// (MaxIDLength), so that anything it could have made shows whole.
const MaxEchoedBytes = 2 * MaxIDLength

// Bounded is s when it has at most MaxEchoedBytes, else its start (whole
// UTF-8 characters) with an ellipsis and the original length, so a reader
// still sees what it was and that it was cut.
func Bounded(s string) string { return BoundedTo(s, MaxEchoedBytes) }

// BoundedTo is Bounded for another limit (a whole message's).
func BoundedTo(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s…(%d bytes)", s[:cut], len(s))
}

// SizeBytes is a size as CSI carries it (int64): every size the driver
// answers goes through it, so that one ZFS or the kernel holds beyond int64
// (a volume made outside the driver, a device past 8 EiB) reads as the most
// int64 can say, never as a negative number.
func SizeBytes(size uint64) int64 {
	return int64(min(size, math.MaxInt64))
}
