package daemon

// The daemon's logger: one line (one journal entry) per event, in the format
// that suits where stderr goes, at a level an operator can change while the
// daemon runs (SIGUSR1: more verbose, SIGUSR2: less).

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/zfs-csi/zfs-csi/cli/envflag"
)

// logLevels are the levels SIGUSR1 and SIGUSR2 step through, most verbose first.
var logLevels = []zerolog.Level{zerolog.DebugLevel, zerolog.InfoLevel, zerolog.WarnLevel, zerolog.ErrorLevel}

// logLevel is the level events must reach to be written; it changes at run
// time, so it is checked as each event is written rather than fixed in the
// logger (zerolog's own level is per logger value and copied everywhere).
type logLevel struct{ level atomic.Int32 }

func (l *logLevel) get() zerolog.Level  { return zerolog.Level(l.level.Load()) }
func (l *logLevel) set(v zerolog.Level) { l.level.Store(int32(v)) }

// step moves the level by delta places in logLevels (negative: more
// verbose), stopping at either end, and returns the new level.
func (l *logLevel) step(delta int) zerolog.Level {
	current := 1
	for i, level := range logLevels {
		if level == l.get() {
			current = i
		}
	}
	next := logLevels[min(max(current+delta, 0), len(logLevels)-1)]
	l.set(next)
	return next
}

// followSignals changes the level on SIGUSR1 (more verbose) and SIGUSR2
// (less) until ctx ends, saying so in the log whatever the level. The
// signals are caught from the moment it returns.
func (l *logLevel) followSignals(ctx context.Context, log zerolog.Logger) {
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGUSR1, syscall.SIGUSR2)
	go func() {
		defer signal.Stop(signals)
		for {
			select {
			case <-ctx.Done():
				return
			case received := <-signals:
				delta := 1
				if received == syscall.SIGUSR1 {
					delta = -1
				}
				log.Log().Str("level_now", l.step(delta).String()).Str("signal", received.String()).Msg("log level changed")
			}
		}
	}()
}

// levelFilter drops events below the current level and hands the others on.
type levelFilter struct {
	level *logLevel
	out   zerolog.LevelWriter
}

func (f levelFilter) Write(p []byte) (int, error) { return f.out.Write(p) }

func (f levelFilter) WriteLevel(level zerolog.Level, p []byte) (int, error) {
	if level != zerolog.NoLevel && level < f.level.get() {
		return len(p), nil
	}
	return f.out.WriteLevel(level, p)
}

// logFormats are the formats newLogger writes.
var logFormats = []string{"json", "console", "journal", "auto"}

// newLogger builds the daemon's logger for a level and a format: json,
// console, journal (journald's native protocol), or auto — journal when
// stderr is connected to the journal, console when it is a terminal, json
// otherwise.
func newLogger(level, format string, stderr io.Writer) (zerolog.Logger, *logLevel, error) {
	parsed, err := envflag.ParseLogLevel(level)
	if err != nil {
		return zerolog.Logger{}, nil, err
	}
	if format == "auto" {
		format = autoLogFormat(stderr, os.Getenv("JOURNAL_STREAM"))
	}
	var out zerolog.LevelWriter
	switch format {
	case "json":
		out = zerolog.MultiLevelWriter(stderr)
	case "console":
		out = zerolog.MultiLevelWriter(zerolog.ConsoleWriter{Out: stderr, TimeFormat: time.RFC3339})
	case "journal":
		out = &journalWriter{socket: journalSocket, fallback: stderr, identifier: "zfs-csi"}
	default:
		return zerolog.Logger{}, nil, fmt.Errorf("log format %q: use json, console, journal or auto", format)
	}
	current := &logLevel{}
	current.set(parsed)
	return zerolog.New(levelFilter{level: current, out: out}).Level(zerolog.DebugLevel).With().Timestamp().Logger(), current, nil
}

// autoLogFormat picks the format for where stderr goes. systemd sets
// JOURNAL_STREAM to the device and inode of the stream it connected to
// stdout and stderr; the variable alone is not enough, since children of a
// service inherit it with their stderr redirected elsewhere.
func autoLogFormat(stderr io.Writer, journalStream string) string {
	file, ok := stderr.(*os.File)
	if !ok {
		return "json"
	}
	var stat unix.Stat_t
	if journalStream != "" && unix.Fstat(int(file.Fd()), &stat) == nil &&
		journalStream == fmt.Sprintf("%d:%d", stat.Dev, stat.Ino) {
		return "journal"
	}
	if _, err := unix.IoctlGetTermios(int(file.Fd()), unix.TCGETS); err == nil {
		return "console"
	}
	return "json"
}
