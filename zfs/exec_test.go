package zfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// fakeScript stands in for zfs and zpool. Each call records its argv (one
// argument per line) and environment under data/<program>.<subcommand>.*, then
// plays back what the test put there: .stdout, .stderr, .exit, .sleep, and
// .read-stdin (copy stdin to .stdin).
const fakeScript = `#!/bin/sh
call='%s'/"$(basename "$0").$1"
printf '%%s\n' "$@" > "$call.argv"
env > "$call.env"
if [ -f "$call.read-stdin" ]; then cat > "$call.stdin"; fi
if [ -f "$call.sleep" ]; then exec sleep "$(cat "$call.sleep")"; fi
if [ -f "$call.stdout" ]; then cat "$call.stdout"; fi
if [ -f "$call.stderr" ]; then cat "$call.stderr" >&2; fi
if [ -f "$call.exit" ]; then exit "$(cat "$call.exit")"; fi
exit 0
`

// fakeZFS is a directory with fake zfs and zpool executables, first on PATH.
type fakeZFS struct {
	t    *testing.T
	data string
}

func newFakeZFS(t *testing.T) *fakeZFS {
	t.Helper()
	root := t.TempDir()
	bin, data := filepath.Join(root, "bin"), filepath.Join(root, "data")
	for _, dir := range []string{bin, data} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	script := fmt.Sprintf(fakeScript, data)
	for _, program := range []string{"zfs", "zpool"} {
		if err := os.WriteFile(filepath.Join(bin, program), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	return &fakeZFS{t: t, data: data}
}

// set writes what the fake does for `program subcommand`: kind is stdout,
// stderr, exit, sleep or read-stdin.
func (f *fakeZFS) set(call, kind, content string) {
	f.t.Helper()
	if err := os.WriteFile(filepath.Join(f.data, call+"."+kind), []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// setFile plays back a testdata file.
func (f *fakeZFS) setFile(call, kind, testdataName string) {
	f.t.Helper()
	content, err := os.ReadFile(filepath.Join("testdata", testdataName))
	if err != nil {
		f.t.Fatal(err)
	}
	f.set(call, kind, string(content))
}

// fail makes the call print stderr and exit 1, as zfs does on errors.
func (f *fakeZFS) fail(call, stderr string) {
	f.set(call, "stderr", stderr)
	f.set(call, "exit", "1")
}

// recorded returns what the fake wrote for a call (argv, env, stdin); ok is
// false when the call never happened.
func (f *fakeZFS) recorded(call, kind string) (string, bool) {
	content, err := os.ReadFile(filepath.Join(f.data, call+"."+kind))
	if errors.Is(err, fs.ErrNotExist) {
		return "", false
	}
	if err != nil {
		f.t.Fatal(err)
	}
	return string(content), true
}

func (f *fakeZFS) argv(call string) []string {
	f.t.Helper()
	content, ok := f.recorded(call, "argv")
	if !ok {
		f.t.Fatalf("%s was never run", call)
	}
	return strings.Split(strings.TrimSuffix(content, "\n"), "\n")
}

func TestEachMethodRunsExactlyTheDocumentedArgv(t *testing.T) {
	volume := CreateOptions{VolSize: 1 << 30, Properties: map[string]string{
		"zfs.csi.dev:managed": "true", "volblocksize": "16384", "compression": "lz4"}}
	tests := []struct {
		name string
		call func(context.Context, *Exec) error
		want []string
	}{
		{"Create makes a filesystem with its properties sorted by name",
			func(ctx context.Context, e *Exec) error {
				return e.Create(ctx, "tank/csi/pvc-a", CreateOptions{Properties: map[string]string{
					"refquota": "1073741824", "mountpoint": "legacy", "zfs.csi.dev:csi-name": "pvc-a"}})
			},
			[]string{"create", "-o", "mountpoint=legacy", "-o", "refquota=1073741824",
				"-o", "zfs.csi.dev:csi-name=pvc-a", "tank/csi/pvc-a"}},
		{"Create makes a thick volume with -V and no -s",
			func(ctx context.Context, e *Exec) error { return e.Create(ctx, "tank/csi/pvc-b", volume) },
			[]string{"create", "-V", "1073741824", "-o", "compression=lz4", "-o", "volblocksize=16384",
				"-o", "zfs.csi.dev:managed=true", "tank/csi/pvc-b"}},
		{"Create makes a sparse volume with -s before -V",
			func(ctx context.Context, e *Exec) error {
				return e.Create(ctx, "tank/csi/pvc-b", CreateOptions{VolSize: 4096, Sparse: true})
			},
			[]string{"create", "-s", "-V", "4096", "tank/csi/pvc-b"}},
		{"Create ignores Sparse for a filesystem because zfs rejects -s there",
			func(ctx context.Context, e *Exec) error {
				return e.Create(ctx, "tank/csi/pvc-a", CreateOptions{Sparse: true})
			},
			[]string{"create", "tank/csi/pvc-a"}},
		{"Clone puts the properties before the snapshot and the new name",
			func(ctx context.Context, e *Exec) error {
				return e.Clone(ctx, "tank/csi/pvc-a@snap-1", "tank/csi/pvc-c",
					map[string]string{"zfs.csi.dev:managed": "true", "mountpoint": "legacy"})
			},
			[]string{"clone", "-o", "mountpoint=legacy", "-o", "zfs.csi.dev:managed=true",
				"tank/csi/pvc-a@snap-1", "tank/csi/pvc-c"}},
		{"Snapshot passes its properties with -o",
			func(ctx context.Context, e *Exec) error {
				return e.Snapshot(ctx, "tank/csi/pvc-a@snap-1", map[string]string{"zfs.csi.dev:csi-name": "snap-1"})
			},
			[]string{"snapshot", "-o", "zfs.csi.dev:csi-name=snap-1", "tank/csi/pvc-a@snap-1"}},
		{"Destroy without options passes no flags",
			func(ctx context.Context, e *Exec) error { return e.Destroy(ctx, "tank/csi/pvc-a", DestroyOptions{}) },
			[]string{"destroy", "tank/csi/pvc-a"}},
		{"Destroy passes -r and -d when asked",
			func(ctx context.Context, e *Exec) error {
				return e.Destroy(ctx, "tank/csi/pvc-a@snap-1", DestroyOptions{Recursive: true, Defer: true})
			},
			[]string{"destroy", "-r", "-d", "tank/csi/pvc-a@snap-1"}},
		{"Set sets every property in one sorted command",
			func(ctx context.Context, e *Exec) error {
				return e.Set(ctx, "tank/csi/pvc-a", map[string]string{"readonly": "on", "refquota": "2147483648"})
			},
			[]string{"set", "readonly=on", "refquota=2147483648", "tank/csi/pvc-a"}},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			fake := newFakeZFS(t)
			if err := test.call(t.Context(), NewExec(ExecConfig{})); err != nil {
				t.Fatal(err)
			}
			if got := fake.argv("zfs." + test.want[0]); !slices.Equal(got, test.want) {
				t.Errorf("argv\n got %q\nwant %q", got, test.want)
			}
		})
	}
}

func TestSetWithoutPropertiesRunsNothing(t *testing.T) {
	fake := newFakeZFS(t)
	if err := NewExec(ExecConfig{}).Set(t.Context(), "tank/csi/pvc-a", nil); err != nil {
		t.Fatal(err)
	}
	if _, ran := fake.recorded("zfs.set", "argv"); ran {
		t.Error("zfs set ran with nothing to set")
	}
}

func TestArgumentsZFSCouldMisreadAreRefusedBeforeRunning(t *testing.T) {
	tests := []struct {
		name string
		call func(context.Context, *Exec) error
	}{
		{"a name starting with a dash would be read as an option",
			func(ctx context.Context, e *Exec) error { return e.Destroy(ctx, "-r", DestroyOptions{}) }},
		{"an empty name would make zfs print its usage",
			func(ctx context.Context, e *Exec) error { return e.Snapshot(ctx, "", nil) }},
		{"a property name with '=' would split in the wrong place",
			func(ctx context.Context, e *Exec) error {
				return e.Set(ctx, "tank/csi/pvc-a", map[string]string{"a=b": "c"})
			}},
		{"a value with a newline could not be read back by zfs list -H",
			func(ctx context.Context, e *Exec) error {
				return e.Create(ctx, "tank/csi/pvc-a", CreateOptions{Properties: map[string]string{"x:y": "a\nb"}})
			}},
		{"a value with a tab could not be read back by zfs list -H",
			func(ctx context.Context, e *Exec) error {
				return e.Copy(ctx, "tank/csi/pvc-a@s", "tank/csi/pvc-b", CopyOptions{Properties: map[string]string{"x:y": "a\tb"}})
			}},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			fake := newFakeZFS(t)
			err := test.call(t.Context(), NewExec(ExecConfig{}))
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
			entries, _ := os.ReadDir(fake.data)
			if len(entries) != 0 {
				t.Errorf("zfs ran anyway: %v", entries)
			}
		})
	}
}

func TestAFailingCommandReturnsAClassifiedCommandError(t *testing.T) {
	fake := newFakeZFS(t)
	fake.fail("zfs.create", "cannot create 'tank/csi/pvc-a': dataset already exists\n")
	err := NewExec(ExecConfig{}).Create(t.Context(), "tank/csi/pvc-a", CreateOptions{})
	if !errors.Is(err, ErrExists) {
		t.Fatalf("err = %v, want ErrExists", err)
	}
	var commandErr *CommandError
	if !errors.As(err, &commandErr) {
		t.Fatalf("err is %T, want *CommandError", err)
	}
	if commandErr.ExitCode != 1 || commandErr.Argv[1] != "create" ||
		!strings.Contains(commandErr.Stderr, "already exists") {
		t.Errorf("CommandError = %+v", commandErr)
	}
	if want := "zfs create: cannot create 'tank/csi/pvc-a': dataset already exists"; err.Error() != want {
		t.Errorf("Error() = %q, want %q", err.Error(), want)
	}
}

func TestTheCommandRunsWithLCALLCAndNoOtherLocale(t *testing.T) {
	fake := newFakeZFS(t)
	t.Setenv("LANG", "de_DE.UTF-8")
	t.Setenv("LC_MESSAGES", "de_DE.UTF-8")
	t.Setenv("LANGUAGE", "de")
	if err := NewExec(ExecConfig{}).Destroy(t.Context(), "tank/csi/pvc-a", DestroyOptions{}); err != nil {
		t.Fatal(err)
	}
	env, _ := fake.recorded("zfs.destroy", "env")
	lines := strings.Split(env, "\n")
	if !slices.Contains(lines, "LC_ALL=C") {
		t.Errorf("LC_ALL=C missing from the child's environment:\n%s", env)
	}
	for _, line := range lines {
		if strings.HasPrefix(line, "LANG") || strings.HasPrefix(line, "LC_MESSAGES") {
			t.Errorf("child environment still has %q", line)
		}
	}
	if !slices.ContainsFunc(lines, func(line string) bool { return strings.HasPrefix(line, "PATH=") }) {
		t.Error("the rest of the environment (PATH) was not passed on")
	}
}

func TestAnEndedContextStopsTheCommandPromptly(t *testing.T) {
	fake := newFakeZFS(t)
	fake.set("zfs.list", "sleep", "30")
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	begin := time.Now()
	_, err := NewExec(ExecConfig{}).List(ctx, ListOptions{Roots: []string{"tank/csi"}})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want context.DeadlineExceeded", err)
	}
	if took := time.Since(begin); took >= 30*time.Second {
		t.Errorf("List returned after %v, no sooner than the sleep would have ended", took)
	}
}

func TestAMissingBinaryIsReportedAsSuch(t *testing.T) {
	e := NewExec(ExecConfig{ZFSPath: filepath.Join(t.TempDir(), "no-zfs-here")})
	err := e.Destroy(t.Context(), "tank/csi/pvc-a", DestroyOptions{})
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("err = %v, want fs.ErrNotExist", err)
	}
}

func TestOnCommandAndTheLoggerSeeEveryCommandButNeverItsOutput(t *testing.T) {
	fake := newFakeZFS(t)
	fake.set("zfs.list", "stdout", "secret-output\n")
	var log bytes.Buffer
	var seen []string
	e := NewExec(ExecConfig{
		Logger: zerolog.New(&log).Level(zerolog.DebugLevel),
		OnCommand: func(subcommand string, d time.Duration, err error) {
			seen = append(seen, fmt.Sprintf("%s %v", subcommand, err != nil))
		},
	})
	_ = e.Destroy(t.Context(), "tank/csi/pvc-a", DestroyOptions{})
	_, err := e.List(t.Context(), ListOptions{Roots: []string{"tank/csi"}})
	if err == nil {
		t.Fatal("a malformed zfs list row parsed without error")
	}
	_, _ = e.Pool(t.Context(), "tank")
	if want := []string{"destroy false", "list false", "zpool list false"}; !slices.Equal(seen, want) {
		t.Errorf("OnCommand saw %q, want %q", seen, want)
	}
	if !strings.Contains(log.String(), `"argv":["zfs","destroy","tank/csi/pvc-a"]`) {
		t.Errorf("the log does not show the destroy argv:\n%s", log.String())
	}
	if strings.Contains(log.String(), "secret-output") || strings.Contains(err.Error(), "secret-output") {
		t.Errorf("command output leaked into the log or the error:\n%s\n%v", log.String(), err)
	}
}

func TestCopyPipesSendIntoReceive(t *testing.T) {
	fake := newFakeZFS(t)
	// Larger than a pipe buffer, and not text, to show it is streamed as is.
	stream := bytes.Repeat([]byte("zfs\x00stream\xff\n"), 40000)
	fake.set("zfs.send", "stdout", string(stream))
	fake.set("zfs.receive", "read-stdin", "")
	var received atomic.Uint64
	err := NewExec(ExecConfig{}).Copy(t.Context(), "tank/csi/pvc-a@snap-1", "tank/csi/pvc-copy", CopyOptions{
		Properties: map[string]string{"zfs.csi.dev:managed": "true", "mountpoint": "legacy"}, Received: &received})
	if err != nil {
		t.Fatal(err)
	}
	if received.Load() != uint64(len(stream)) {
		t.Errorf("Copy counted %d bytes received, send wrote %d", received.Load(), len(stream))
	}
	if got, want := fake.argv("zfs.send"), []string{"send", "tank/csi/pvc-a@snap-1"}; !slices.Equal(got, want) {
		t.Errorf("send argv %q, want %q", got, want)
	}
	wantReceive := []string{"receive", "-u", "-o", "mountpoint=legacy", "-o", "zfs.csi.dev:managed=true",
		"tank/csi/pvc-copy"}
	if got := fake.argv("zfs.receive"); !slices.Equal(got, wantReceive) {
		t.Errorf("receive argv %q, want %q", got, wantReceive)
	}
	if received, _ := fake.recorded("zfs.receive", "stdin"); received != string(stream) {
		t.Errorf("receive got %d bytes, want the %d bytes send wrote", len(received), len(stream))
	}
}

func TestAFailedCopyReturnsTheErrorThatExplainsIt(t *testing.T) {
	tests := []struct {
		name     string
		setup    func(*fakeZFS)
		wantKind error
		wantSide string
	}{
		{"receive refusing the stream fails Copy with receive's error", func(fake *fakeZFS) {
			fake.set("zfs.send", "stdout", strings.Repeat("x", 1<<20))
			fake.fail("zfs.receive", "cannot receive new filesystem stream: destination 'tank/csi/pvc-copy' exists\n"+
				"must specify -F to overwrite it\n")
		}, ErrExists, "receive"},
		{"send failing fails Copy with send's error, not receive's complaint about an empty stream", func(fake *fakeZFS) {
			fake.fail("zfs.send", "cannot open 'tank/csi/pvc-a@snap-1': dataset does not exist\n")
			fake.set("zfs.receive", "read-stdin", "")
			fake.fail("zfs.receive", "cannot receive: failed to read from stream\n")
		}, ErrNotFound, "send"},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			fake := newFakeZFS(t)
			test.setup(fake)
			err := NewExec(ExecConfig{}).Copy(t.Context(), "tank/csi/pvc-a@snap-1", "tank/csi/pvc-copy", CopyOptions{})
			var commandErr *CommandError
			if !errors.Is(err, test.wantKind) || !errors.As(err, &commandErr) || commandErr.Argv[1] != test.wantSide {
				t.Errorf("err = %v, want %s's %v", err, test.wantSide, test.wantKind)
			}
		})
	}
}

func TestCopyStopsBothSidesWhenTheContextEnds(t *testing.T) {
	fake := newFakeZFS(t)
	fake.set("zfs.send", "sleep", "30")
	fake.set("zfs.receive", "read-stdin", "")
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	begin := time.Now()
	err := NewExec(ExecConfig{}).Copy(ctx, "tank/csi/pvc-a@snap-1", "tank/csi/pvc-copy", CopyOptions{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want context.DeadlineExceeded", err)
	}
	if took := time.Since(begin); took >= 30*time.Second {
		t.Errorf("Copy returned after %v, no sooner than the sleep would have ended", took)
	}
}

func TestACommandWithoutADeadlineGetsOne(t *testing.T) {
	fake := newFakeZFS(t)
	fake.set("zfs.list", "sleep", "30")
	begin := time.Now()
	_, err := NewExec(ExecConfig{CommandTimeout: 200 * time.Millisecond}).List(context.Background(), ListOptions{Roots: []string{"tank/csi"}})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want context.DeadlineExceeded", err)
	}
	if took := time.Since(begin); took >= 30*time.Second {
		t.Errorf("List returned after %v: the command ran unbounded", took)
	}
}
