package daemon

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

func TestTheLevelCanChangeWhileTheLoggerIsInUse(t *testing.T) {
	var out bytes.Buffer
	log, level, err := newLogger("info", "json", &out)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name      string
		delta     int
		want      zerolog.Level
		debugSeen bool
		infoSeen  bool
	}{
		{"at info, debug events are dropped", 0, zerolog.InfoLevel, false, true},
		{"one step more verbose writes debug events", -1, zerolog.DebugLevel, true, true},
		{"debug is the most verbose level", -1, zerolog.DebugLevel, true, true},
		{"two steps less verbose drops info events", +2, zerolog.WarnLevel, false, false},
		{"error is the least verbose level", +5, zerolog.ErrorLevel, false, false},
	}
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			if step.delta != 0 {
				level.step(step.delta)
			}
			out.Reset()
			log.Debug().Msg("a debug event")
			log.Info().Msg("an info event")
			log.Error().Msg("an error event")
			written := out.String()
			if level.get() != step.want || strings.Contains(written, "a debug event") != step.debugSeen ||
				strings.Contains(written, "an info event") != step.infoSeen || !strings.Contains(written, "an error event") {
				t.Errorf("level %s, written:\n%s", level.get(), written)
			}
		})
	}
}

// lockedBuffer is a log sink the signal goroutine writes while the test reads.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestSIGUSR1AndSIGUSR2RaiseAndLowerTheLevel(t *testing.T) {
	var out lockedBuffer
	log, level, err := newLogger("info", "json", &out)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	level.followSignals(ctx, log)
	for _, step := range []struct {
		signal syscall.Signal
		want   zerolog.Level
	}{{syscall.SIGUSR1, zerolog.DebugLevel}, {syscall.SIGUSR2, zerolog.InfoLevel}, {syscall.SIGUSR2, zerolog.WarnLevel}} {
		if err := syscall.Kill(os.Getpid(), step.signal); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for level.get() != step.want && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if level.get() != step.want {
			t.Fatalf("after %s the level is %s, want %s", step.signal, level.get(), step.want)
		}
	}
	// The change is logged just after it is made: wait for the line.
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(out.String(), `"level_now":"warn"`) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(out.String(), `"level_now":"warn"`) {
		t.Errorf("the change to warn was not logged:\n%s", out.String())
	}
}

func TestNewLoggerRefusesUnknownLevelsAndFormats(t *testing.T) {
	for _, test := range []struct{ name, level, format string }{
		{"an unknown level", "loud", "json"},
		{"an empty level", "", "json"},
		{"the trace level the daemon does not use", "trace", "json"},
		{"an unknown format", "info", "xml"},
	} {
		t.Run(test.name, func(t *testing.T) {
			if _, _, err := newLogger(test.level, test.format, &bytes.Buffer{}); err == nil {
				t.Error("accepted")
			}
		})
	}
}

func TestAutoFormatIsJournalOnlyWhenStderrIsTheJournalStream(t *testing.T) {
	reader, writer, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	defer writer.Close()
	var stat unix.Stat_t
	if err := unix.Fstat(int(writer.Fd()), &stat); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name          string
		stderr        io.Writer
		journalStream string
		want          string
	}{
		{"stderr connected to the stream JOURNAL_STREAM names", writer, fmt.Sprintf("%d:%d", stat.Dev, stat.Ino), "journal"},
		{"JOURNAL_STREAM inherited by a process whose stderr goes elsewhere", writer, "1:2", "json"},
		{"no JOURNAL_STREAM and no terminal", writer, "", "json"},
		{"a writer that is no file", &bytes.Buffer{}, "1:2", "json"},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			if got := autoLogFormat(test.stderr, test.journalStream); got != test.want {
				t.Errorf("format %q, want %q", got, test.want)
			}
		})
	}
}

func TestJournalEntriesCarryPriorityAndFields(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "journal.sock")
	journal, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: socket, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer journal.Close()
	var fallback bytes.Buffer
	log := zerolog.New(&journalWriter{socket: socket, identifier: "zfs-csi", fallback: &fallback})
	log.Warn().Str("method", "CreateVolume").Str("code", "ResourceExhausted").Int("attempt", 2).
		Str("error", "no space\nleft").Send()

	buffer := make([]byte, 64<<10)
	journal.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := journal.Read(buffer)
	if err != nil {
		t.Fatal(err)
	}
	entry := string(buffer[:n])
	for _, want := range []string{
		`MESSAGE={"level":"warn","method":"CreateVolume","code":"ResourceExhausted","attempt":2,"error":"no space\nleft"}` + "\n",
		"PRIORITY=4\n", "SYSLOG_IDENTIFIER=zfs-csi\n", "METHOD=CreateVolume\n", "CODE=ResourceExhausted\n", "ATTEMPT=2\n",
	} {
		if !strings.Contains(entry, want) {
			t.Errorf("entry lacks %q:\n%q", want, entry)
		}
	}
	var length [8]byte
	binary.LittleEndian.PutUint64(length[:], uint64(len("no space\nleft")))
	if !strings.Contains(entry, "ERROR\n"+string(length[:])+"no space\nleft\n") {
		t.Errorf("a value with a newline is not length-prefixed:\n%q", entry)
	}
	if strings.Contains(entry, "LEVEL=") || fallback.Len() > 0 {
		t.Errorf("level repeated as a field, or written to the fallback (%q)", fallback.String())
	}
}

func TestJournalEventsGoToTheFallbackWhenJournaldIsAway(t *testing.T) {
	var fallback bytes.Buffer
	log := zerolog.New(&journalWriter{socket: filepath.Join(t.TempDir(), "missing.sock"), identifier: "zfs-csi", fallback: &fallback})
	log.Info().Msg("still written")
	if !strings.Contains(fallback.String(), `"message":"still written"`) {
		t.Errorf("fallback got %q", fallback.String())
	}
}
