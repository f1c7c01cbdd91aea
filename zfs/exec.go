package zfs

// Exec runs zfs and zpool itself instead of using github.com/mistifyio/go-zfs/v3
// (v3.1.0): that library keeps its runner and logger in package-level globals
// (SetRunner, SetLogger) with one timeout for every call instead of the caller's
// context, and its Dataset reads a fixed column list with no user properties,
// refquota, clones or defer_destroy, so List would need its own parser anyway.
//
// The boundary: everything in the zfs-csi binary reads and changes ZFS through
// this package, the operator commands included (they must show what the
// driver sees, and that lives in user properties). go-zfs serves where its
// costs do not matter and its independence does: the e2e tests read back what
// the driver did with it, a second parser that a bug here cannot fool
// (e2e/tests/helpers_test.go).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// ExecConfig configures Exec. The zero value runs "zfs" and "zpool" from PATH
// and logs nothing.
type ExecConfig struct {
	// ZFSPath and ZpoolPath name the binaries. A name without a slash is looked
	// up on PATH at every call. Empty means "zfs" and "zpool".
	ZFSPath   string
	ZpoolPath string
	// Logger gets one debug line per command with its argv, duration and
	// error. Stdin and stdout are never logged.
	Logger zerolog.Logger
	// OnCommand, when set, is called after every command with its subcommand
	// ("create", "list", "send", …; "zpool list" for zpool), how long it ran
	// and its error (nil on success). Calls may come from several goroutines
	// at once.
	OnCommand func(subcommand string, d time.Duration, err error)
	// CommandTimeout bounds a command whose caller's context has no
	// deadline (the reaper, metrics, operator reads): no command runs
	// unbounded. 0 means DefaultCommandTimeout.
	CommandTimeout time.Duration
}

// DefaultCommandTimeout is ExecConfig.CommandTimeout's default: far longer
// than any listing of a pool takes, short enough that a command stuck in
// the kernel gives its caller (and the caller's lock) back.
const DefaultCommandTimeout = 10 * time.Minute

// Exec implements Interface by running the zfs and zpool commands: argv only,
// never a shell, LC_ALL=C so that stderr can be classified, and the caller's
// context as the deadline (SIGTERM when it ends, SIGKILL killDelay later).
// Exec is safe for concurrent use.
type Exec struct {
	cfg ExecConfig
	// objsetStats is Inspect's ioctl (readObjsetStats); tests replace it.
	objsetStats func(ctx context.Context, name string) (objsetStats, []byte, error)
	// inspectMisfit is set at Inspect's first answer in a form it does not
	// know (inspectByList).
	inspectMisfit atomic.Bool
}

var _ Interface = (*Exec)(nil)

// killDelay is how long a command has to exit after SIGTERM before it is
// killed. A zfs command stuck in an ioctl does not die sooner either way.
const killDelay = 2 * time.Second

// NewExec returns an Exec for cfg, filling in the default binary names.
func NewExec(cfg ExecConfig) *Exec {
	if cfg.ZFSPath == "" {
		cfg.ZFSPath = "zfs"
	}
	if cfg.ZpoolPath == "" {
		cfg.ZpoolPath = "zpool"
	}
	if cfg.CommandTimeout <= 0 {
		cfg.CommandTimeout = DefaultCommandTimeout
	}
	return &Exec{cfg: cfg, objsetStats: readObjsetStats}
}

// bound gives ctx the default deadline when it has none.
func (e *Exec) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, e.cfg.CommandTimeout)
}

// Create runs `zfs create [-s] [-V volsize] -o k=v … name`. It never passes
// -p: a missing parent is an error (ErrNotFound), not something to invent.
// Sparse only applies to volumes; zfs rejects -s for a filesystem.
func (e *Exec) Create(ctx context.Context, name string, opts CreateOptions) error {
	args := []string{"create"}
	if opts.VolSize > 0 {
		if opts.Sparse {
			args = append(args, "-s")
		}
		args = append(args, "-V", strconv.FormatUint(opts.VolSize, 10))
	}
	if len(opts.Key) == 0 {
		return e.change(ctx, args, opts.Properties, name)
	}
	if opts.Properties["keylocation"] != "prompt" {
		return fmt.Errorf("zfs create %s: %w: a key is given on stdin only with keylocation=prompt", name, ErrInvalid)
	}
	if err := checkNames(name); err != nil {
		return err
	}
	options, err := propertyOptions(opts.Properties)
	if err != nil {
		return err
	}
	_, err = e.runWithInput(ctx, append(append([]string{e.cfg.ZFSPath}, args...), append(options, name)...), keyInput(opts.Key))
	return err
}

// LoadKey runs `zfs load-key name` with the key on stdin.
func (e *Exec) LoadKey(ctx context.Context, name string, key []byte) error {
	if err := checkNames(name); err != nil {
		return err
	}
	_, err := e.runWithInput(ctx, []string{e.cfg.ZFSPath, "load-key", name}, keyInput(key))
	return err
}

// VerifyKey runs `zfs load-key -n name` with the key on stdin. OpenZFS
// (2.0 to 2.3, lib/libzfs/libzfs_crypto.c zfs_crypto_load_key) skips its
// "Key already loaded" check when -n is given, and the kernel
// (spa_keystore_load_wkey) unwraps the dataset's key with the one given and
// returns before inserting it: so a loaded key is verified like an unloaded
// one, exit 0 and "1 / 1 key(s) successfully verified" on stdout; a wrong
// key exits 255 with "Incorrect key provided" on stderr. Nothing changes
// either way.
func (e *Exec) VerifyKey(ctx context.Context, name string, key []byte) error {
	if err := checkNames(name); err != nil {
		return err
	}
	_, err := e.runWithInput(ctx, []string{e.cfg.ZFSPath, "load-key", "-n", name}, keyInput(key))
	return err
}

// keyInput is a key as zfs reads it from stdin: one line.
func keyInput(key []byte) io.Reader {
	return io.MultiReader(bytes.NewReader(key), strings.NewReader("\n"))
}

// Clone runs `zfs clone -o k=v … snapshot name`.
func (e *Exec) Clone(ctx context.Context, snapshot, name string, properties map[string]string) error {
	if err := checkNames(snapshot); err != nil {
		return err
	}
	return e.change(ctx, []string{"clone"}, properties, snapshot, name)
}

// Snapshot runs `zfs snapshot -o k=v … name`.
func (e *Exec) Snapshot(ctx context.Context, name string, properties map[string]string) error {
	return e.change(ctx, []string{"snapshot"}, properties, name)
}

// Destroy runs `zfs destroy [-r] [-d] name`.
func (e *Exec) Destroy(ctx context.Context, name string, opts DestroyOptions) error {
	if err := checkNames(name); err != nil {
		return err
	}
	args := []string{"destroy"}
	if opts.Recursive {
		args = append(args, "-r")
	}
	if opts.Defer {
		args = append(args, "-d")
	}
	_, err := e.zfs(ctx, append(args, name)...)
	return err
}

// Set runs `zfs set k=v … name` (several properties in one command, sorted by
// name). With no properties there is nothing to do and nothing runs.
func (e *Exec) Set(ctx context.Context, name string, properties map[string]string) error {
	if err := checkNames(name); err != nil {
		return err
	}
	assignments, err := sortedAssignments(properties)
	if err != nil || len(assignments) == 0 {
		return err
	}
	args := append(append([]string{"set"}, assignments...), name)
	_, err = e.zfs(ctx, args...)
	return err
}

// Inherit runs `zfs inherit <property> <name>` for one property, and the
// inherit channel program for several (zfs inherit takes one at a time).
func (e *Exec) Inherit(ctx context.Context, name string, properties ...string) error {
	if err := checkNames(name); err != nil {
		return err
	}
	for _, property := range properties {
		if property == "" || strings.ContainsAny(property, "=\t\n ") || strings.HasPrefix(property, "-") {
			return fmt.Errorf("zfs: %q is not a property: %w", property, ErrInvalid)
		}
	}
	switch len(properties) {
	case 0:
		return nil
	case 1:
		_, err := e.zfs(ctx, "inherit", properties[0], name)
		return err
	}
	result, err := e.program(ctx, "inherit", inheritProgram, name, append([]string{name}, properties...)...)
	if err == nil && result.Outcome == "unsupported" {
		return fmt.Errorf("zfs program: zfs.sync.inherit: %w", ErrUnsupported)
	}
	return err
}

// change runs `zfs <args…> -o k=v … <names…>`, the shape of create, clone
// and snapshot.
func (e *Exec) change(ctx context.Context, args []string, properties map[string]string, names ...string) error {
	if err := checkNames(names...); err != nil {
		return err
	}
	options, err := propertyOptions(properties)
	if err != nil {
		return err
	}
	args = append(append(args, options...), names...)
	_, err = e.zfs(ctx, args...)
	return err
}

// Copy pipes `zfs send snapshot` into `zfs receive -u -o k=v … name`, with
// no shell. The stream passes through this process, which counts it into
// opts.Received (a copy can take longer than the call that asked for it,
// and its progress is what a retry reports). Both commands run under ctx;
// when one fails the other is stopped, and the error returned is receive's
// if zfs classified it, else send's if classified, else whichever failed first.
//
// A failed Copy leaves nothing: receive is not resumable (-s), so zfs
// discards a stream cut short. Copy does not clean up after a receive that
// succeeded and a later step that did not: the caller decides.
func (e *Exec) Copy(ctx context.Context, snapshot, name string, opts CopyOptions) error {
	if err := checkNames(snapshot, name); err != nil {
		return err
	}
	options, err := propertyOptions(opts.Properties)
	if err != nil {
		return err
	}
	ctx, cancel := e.bound(ctx)
	defer cancel()
	pipeCtx, stop := context.WithCancel(ctx)
	defer stop()
	send := e.command(pipeCtx, []string{e.cfg.ZFSPath, "send", snapshot})
	receive := e.command(pipeCtx, append(append([]string{e.cfg.ZFSPath, "receive", "-u"}, options...), name))
	relay, err := newRelay(send, receive, opts.Received)
	if err != nil {
		return err
	}
	defer relay.close()
	if err := e.start(send); err != nil {
		return err
	}
	err = e.start(receive)
	// Each child holds its own copy of its end now. Dropping ours means a
	// side that dies ends the relay instead of leaving it blocked.
	relay.started()
	if err != nil {
		stop()
		relay.close()
		_ = e.wait(pipeCtx, send)
		return err
	}
	go relay.run(pipeCtx)
	return e.waitPipeline(pipeCtx, stop, send, receive)
}

// relay moves the stream from send's stdout to receive's stdin, counting it.
// It uses OS pipes it owns, not exec's StdoutPipe: exec closes that when
// send exits, which could drop stream bytes not yet read.
type relay struct {
	fromSend, sendEnd     *os.File // read end (ours), write end (send's stdout)
	receiveEnd, toReceive *os.File // read end (receive's stdin), write end (ours)
	received              *atomic.Uint64
	closeOnce             sync.Once
}

func newRelay(send, receive *process, received *atomic.Uint64) (*relay, error) {
	fromSend, sendEnd, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("zfs send: %w", err)
	}
	receiveEnd, toReceive, err := os.Pipe()
	if err != nil {
		fromSend.Close()
		sendEnd.Close()
		return nil, fmt.Errorf("zfs receive: %w", err)
	}
	if received == nil {
		received = new(atomic.Uint64)
	}
	send.cmd.Stdout, receive.cmd.Stdin = sendEnd, receiveEnd
	return &relay{fromSend: fromSend, sendEnd: sendEnd, receiveEnd: receiveEnd, toReceive: toReceive, received: received}, nil
}

// started drops the children's ends of the pipes from this process.
func (r *relay) started() {
	r.sendEnd.Close()
	r.receiveEnd.Close()
}

// run copies until send's stdout ends or receive stops reading, then closes
// receive's stdin (so it sees the end of the stream) and send's stdout (so a
// send still writing fails instead of blocking). An end of ctx stops it too.
func (r *relay) run(ctx context.Context) {
	stopped := context.AfterFunc(ctx, r.close)
	defer stopped()
	defer r.close()
	buffer := make([]byte, 1<<20)
	for {
		n, readErr := r.fromSend.Read(buffer)
		if n > 0 {
			if _, err := r.toReceive.Write(buffer[:n]); err != nil {
				return
			}
			r.received.Add(uint64(n))
		}
		if readErr != nil {
			return
		}
	}
}

func (r *relay) close() {
	r.closeOnce.Do(func() {
		r.fromSend.Close()
		r.toReceive.Close()
		r.sendEnd.Close()
		r.receiveEnd.Close()
	})
}

// waitPipeline waits for both sides of Copy, stopping the survivor as soon as
// one side fails, and picks the error that explains the failure best.
func (e *Exec) waitPipeline(ctx context.Context, stop context.CancelFunc, send, receive *process) error {
	type outcome struct {
		p   *process
		err error
	}
	done := make(chan outcome, 2)
	for _, p := range []*process{send, receive} {
		go func() { done <- outcome{p, e.wait(ctx, p)} }()
	}
	errs := map[*process]error{}
	var first error
	for range 2 {
		o := <-done
		errs[o.p] = o.err
		if o.err != nil && first == nil {
			first = o.err
			stop()
		}
	}
	switch {
	case classified(errs[receive]):
		return errs[receive]
	case classified(errs[send]):
		return errs[send]
	}
	return first
}

func classified(err error) bool {
	var commandErr *CommandError
	return errors.As(err, &commandErr) && commandErr.Kind != nil
}

// process is one started (or about to be started) zfs or zpool command.
type process struct {
	argv    []string
	label   string // what OnCommand calls it, when argv[1] does not say enough
	cmd     *exec.Cmd
	stderr  bytes.Buffer
	started time.Time
}

// zfs runs `zfs args…` to completion and returns its stdout.
func (e *Exec) zfs(ctx context.Context, args ...string) ([]byte, error) {
	return e.run(ctx, append([]string{e.cfg.ZFSPath}, args...))
}

// run is the one way this package executes a command to completion: it
// returns stdout, and stdout also when the command fails (List needs the rows
// zfs printed before complaining about a missing root).
func (e *Exec) run(ctx context.Context, argv []string) ([]byte, error) {
	return e.runWithInput(ctx, argv, nil)
}

// runWithInput is run with stdin (nil for none): the one way a secret
// reaches zfs.
func (e *Exec) runWithInput(ctx context.Context, argv []string, stdin io.Reader) ([]byte, error) {
	ctx, cancel := e.bound(ctx)
	defer cancel()
	p := e.command(ctx, argv)
	var stdout bytes.Buffer
	p.cmd.Stdout, p.cmd.Stdin = &stdout, stdin
	if err := e.start(p); err != nil {
		return nil, err
	}
	err := e.wait(ctx, p)
	return stdout.Bytes(), err
}

// command prepares argv under ctx: no shell, LC_ALL=C, stderr captured,
// SIGTERM when ctx ends and SIGKILL killDelay later. Stdin and stdout are the
// caller's business.
func (e *Exec) command(ctx context.Context, argv []string) *process {
	p := &process{argv: argv}
	p.cmd = exec.CommandContext(ctx, argv[0], argv[1:]...)
	p.cmd.Env = CLocaleEnv(os.Environ())
	p.cmd.Stderr = &p.stderr
	p.cmd.Cancel = func() error { return p.cmd.Process.Signal(syscall.SIGTERM) }
	p.cmd.WaitDelay = killDelay
	return p
}

func (e *Exec) start(p *process) error {
	p.started = time.Now()
	if err := p.cmd.Start(); err != nil {
		err = fmt.Errorf("%s: %w", commandName(p.argv), err)
		e.report(p, err)
		return err
	}
	return nil
}

// abandonDelay is how long wait waits for a command to exit after its
// context ended: SIGTERM, SIGKILL killDelay later, and as long again for the
// kernel to let it go.
const abandonDelay = 2 * killDelay

// wait waits for a started command and turns its end into this package's
// error: the caller's context error if ctx ended, a *CommandError if the
// command exited non-zero, nil on success.
//
// A zfs command blocked in the kernel (an ioctl on a suspended pool) does
// not die of SIGKILL until the kernel lets it go. wait gives up on it
// abandonDelay after ctx ended and returns the context's error, so that
// its caller (holding a volume's lock) is not wedged with it; a goroutine
// reaps the process whenever it ends.
func (e *Exec) wait(ctx context.Context, p *process) error {
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	var err error
	select {
	case err = <-exited:
	case <-ctx.Done():
		select {
		case err = <-exited:
		case <-time.After(abandonDelay):
			err = fmt.Errorf("%s: %w (it did not exit after SIGKILL and was left behind: stuck in the kernel?)", commandName(p.argv), ctx.Err())
			e.report(p, err)
			return err
		}
	}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case ctx.Err() != nil:
		err = fmt.Errorf("%s: %w", commandName(p.argv), ctx.Err())
	case errors.As(err, &exitErr):
		stderr := p.stderr.String()
		err = &CommandError{Argv: p.argv, ExitCode: exitErr.ExitCode(), Stderr: stderr, Kind: classify(stderr)}
	default:
		err = fmt.Errorf("%s: %w", commandName(p.argv), err)
	}
	e.report(p, err)
	return err
}

// report logs a finished command and tells OnCommand about it.
func (e *Exec) report(p *process, err error) {
	took := time.Since(p.started)
	e.cfg.Logger.Debug().Strs("argv", p.argv).Dur("duration", took).Err(err).Msg("zfs command")
	if e.cfg.OnCommand != nil {
		subcommand := ""
		if len(p.argv) > 1 {
			subcommand = p.argv[1]
		}
		if p.argv[0] == e.cfg.ZpoolPath {
			subcommand = "zpool " + subcommand
		}
		if p.label != "" {
			subcommand = p.label
		}
		e.cfg.OnCommand(subcommand, took, err)
	}
}

// CLocaleEnv is environ without locale settings, plus LC_ALL=C: the messages
// classify matches are the untranslated ones. The node service runs its
// filesystem tools with it too, so their errors read the same everywhere.
func CLocaleEnv(environ []string) []string {
	env := make([]string, 0, len(environ)+1)
	for _, kv := range environ {
		key, _, _ := strings.Cut(kv, "=")
		if key == "LANG" || key == "LANGUAGE" || strings.HasPrefix(key, "LC_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C")
}

// checkNames rejects names zfs could read as options (a leading '-') or that
// are empty, before anything runs.
func checkNames(names ...string) error {
	for _, name := range names {
		if name == "" || strings.HasPrefix(name, "-") || strings.ContainsAny(name, "\t\n") {
			return fmt.Errorf("zfs: bad dataset name %q: %w", name, ErrInvalid)
		}
	}
	return nil
}

// propertyOptions is "-o", "k=v" for each property, sorted by name.
func propertyOptions(properties map[string]string) ([]string, error) {
	assignments, err := sortedAssignments(properties)
	if err != nil {
		return nil, err
	}
	options := make([]string, 0, 2*len(assignments))
	for _, assignment := range assignments {
		options = append(options, "-o", assignment)
	}
	return options, nil
}

// sortedAssignments is "k=v" for each property, sorted by name. Values with a
// tab or newline are refused: `zfs list -H` could not give them back intact.
func sortedAssignments(properties map[string]string) ([]string, error) {
	keys := make([]string, 0, len(properties))
	for key := range properties {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	assignments := make([]string, 0, len(keys))
	for _, key := range keys {
		value := properties[key]
		if key == "" || strings.HasPrefix(key, "-") || strings.ContainsAny(key, "=\t\n") ||
			strings.ContainsAny(value, "\t\n") {
			return nil, fmt.Errorf("zfs: bad property %q=%q: %w", key, value, ErrInvalid)
		}
		assignments = append(assignments, key+"="+value)
	}
	return assignments, nil
}
