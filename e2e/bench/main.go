// Command bench measures zfs-csi on real ZFS against the bare zfs (and
// mount) commands doing the same work in the same run, and prints one table
// (make bench; it runs inside the e2e guest as root, on pool tank).
//
//	bench -binary /share/zfs-csi [-pool tank] [-n 50] [-out results/bench.txt]
//
// Sections, in the table's order (they run as 6, 5, 1, 4, 2, 3, 7, 8, 9):
//
//  1. sequential calls, n each, driver and bare interleaved (in an order
//     drawn for each round) to cancel drift: CreateVolume of a dataset and
//     of a zvol (1 GiB, three ZFS properties), CreateSnapshot, CreateVolume
//     from a snapshot, DeleteVolume of a clone, DeleteSnapshot, DeleteVolume
//     of a dataset; CreateSnapshot again on a volume with 100 snapshots;
//  2. 8 clients creating 200 volumes at once, against 8 parallel zfs create;
//  3. ListVolumes over 1,000 volumes, paged by 100 and in one page, against
//     one zfs list of the same datasets and columns; the daemon's peak RSS;
//  4. NodeStageVolume + NodePublishVolume of a dataset and of an ext4 zvol
//     (formatted before) against mount + mount --bind;
//  5. daemon start to READY=1 (sd_notify) and to Probe ready=true; idle RSS;
//  6. the zfs and zpool commands each call runs, counted by wrappers on the
//     daemon's PATH (a separate daemon: the wrappers cost time);
//  7. group snapshots of 16 volumes; 8. snapshot metadata of a 1 GiB zvol;
//  9. scale: start, listings, the reaper's sweep at start and a pass after
//     it, a metrics scrape, GetCapacity, CreateVolume, CreateSnapshot and peak
//     RSS at 100, 1,000 and 10,000 volumes (-scale); runs alone with
//     -sections 9.
//
// Each row's bare side is the cheapest way to do the call's work on this
// host, named in the row and in the table's header (bareSides):
//
//   - a zfs command the driver runs (create, clone, snapshot, list) is
//     replayed from the argv section 6 captured, with other dataset names:
//     the same options and properties (sections 1, 2, 3, 9);
//   - where the driver runs a channel program (CreateSnapshot, DeleteSnapshot,
//     DeleteVolume, CreateVolumeGroupSnapshot), rows against the plain
//     command (zfs snapshot -o, zfs destroy, zfs snapshot of all) and against
//     the same program with the same arguments run bare (programs.go);
//   - the node's mounts: the driver's three mount(2) calls made from the
//     bench's own process (the target's measure), and the forked mount
//     commands beside them (section 4); NodeStage's ownership read, in
//     process (zfs.Exec.Inspect), against the bare ioctl it makes, and the
//     zfs list it ran before against it (ownership.go);
//   - work a call leaves running when it returns is waited for before the
//     next side and shown in a row of its own (interleaveSides).
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"

	"github.com/zfs-csi/zfs-csi/rules"
)

// config holds the command line.
type config struct {
	binary      string
	pool        string
	out         string
	work        string
	n           int // sequential calls per item
	nodeN       int // stage+publish rounds per kind
	clients     int
	concurrent  int // volumes created by the clients (and by the bare side)
	listed      int // volumes ListVolumes lists
	pageSize    int
	listRepeats int
	starts      int
	scale       []int  // section 9's levels, in volumes
	sections    string // which sections run, in this order
	logLevel    string // the daemons' --log-level
	reaperOnly  bool   // section 9 measures starts and the reaper only
}

func parseConfig() config {
	c := config{}
	flag.StringVar(&c.binary, "binary", "/share/zfs-csi", "the zfs-csi binary")
	flag.StringVar(&c.pool, "pool", "tank", "the pool to work in (datasets under <pool>/bench)")
	flag.StringVar(&c.out, "out", "", "also write the table to this file")
	flag.StringVar(&c.work, "work", "/tmp/zfs-csi-bench", "sockets, logs, mount points")
	flag.IntVar(&c.n, "n", 50, "sequential operations per item")
	flag.IntVar(&c.nodeN, "node-n", 30, "stage+publish rounds per volume kind")
	flag.IntVar(&c.clients, "clients", 8, "concurrent clients")
	flag.IntVar(&c.concurrent, "concurrent", 200, "volumes the concurrent clients create")
	flag.IntVar(&c.listed, "list", 1000, "volumes to list")
	flag.IntVar(&c.pageSize, "page", 100, "ListVolumes page size")
	flag.IntVar(&c.listRepeats, "list-repeats", 5, "rounds of the listing comparison")
	flag.IntVar(&c.starts, "starts", 10, "daemon starts")
	flag.StringVar(&c.sections, "sections", "6,5,1,4,2,3,7,8,9", "the sections to run, in order; 1, 2 and 3 replay command lines section 6 captures")
	flag.StringVar(&c.logLevel, "log-level", "info", "the daemons' --log-level (debug logs each zfs command with its duration)")
	flag.BoolVar(&c.reaperOnly, "reaper-only", false, "section 9 measures only the daemon's start and its reaper at each level (10,000 volumes in a fraction of the time)")
	scale := flag.String("scale", "100,1000,10000", "section 9's levels: volumes under one parent, in increasing order")
	quick := flag.Bool("quick", false, "a small run to check the bench itself (n=4, 40 concurrent, 100 listed)")
	flag.Parse()
	for _, level := range strings.Split(*scale, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(level))
		if err != nil || n < 2 || (len(c.scale) > 0 && n <= c.scale[len(c.scale)-1]) {
			fmt.Fprintf(os.Stderr, "bench: -scale %q: want increasing volume counts of at least 2\n", *scale)
			os.Exit(2)
		}
		c.scale = append(c.scale, n)
	}
	if *quick {
		c.n, c.nodeN, c.concurrent, c.listed, c.pageSize, c.listRepeats, c.starts = 4, 3, 40, 100, 10, 2, 2
		c.scale = []int{20, 60}
	}
	return c
}

// bench is one run.
type bench struct {
	cfg       config
	tools     tools
	props     rules.UserProps
	templates map[string]template        // argv the driver ran, by what they did (section 6)
	programs  map[string]programTemplate // channel programs the driver ran, likewise
	counts    map[string]string          // commands per call, by call (section 6)
	rows      map[string][]row           // by section
	notes     []string
	timings   []string
	version   string // the daemon's, from GetPluginInfo in section 6
	started   time.Time
}

// Datasets under <pool>/bench: one parent per daemon, so that each daemon
// lists only what its section made, and one for the bare side of section 1.
func (b *bench) dataset(name string) string { return b.cfg.pool + "/bench/" + name }

func main() {
	cfg := parseConfig()
	if err := runBench(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func runBench(cfg config) (err error) {
	t, err := findTools()
	if err != nil {
		return err
	}
	b := &bench{cfg: cfg, tools: t, props: rules.NewUserProps(driverName), templates: map[string]template{}, programs: map[string]programTemplate{},
		counts: map[string]string{}, rows: map[string][]row{}}
	ctx := context.Background()
	b.started = time.Now()
	if err := b.setup(ctx); err != nil {
		return err
	}
	known := map[string]section{
		"6": {"6", "6 commands per call", b.countCommands},
		"5": {"5", "5 start-up", b.startup},
		"1": {"1", "1 sequential", b.sequential},
		"4": {"4", "4 node", b.nodeCalls},
		"2": {"2", "2 concurrency", b.concurrency},
		"3": {"3", "3 listing", b.listing},
		"7": {"7", "7 group snapshots", b.groupSnapshots},
		"8": {"8", "8 snapshot metadata", b.snapshotMetadata},
		"9": {"9", "9 scale", b.growth},
	}
	var sections []section
	for _, number := range strings.Split(cfg.sections, ",") {
		s, ok := known[strings.TrimSpace(number)]
		if !ok {
			return fmt.Errorf("no section %q", number)
		}
		if strings.Contains("123", s.number) && !strings.Contains(cfg.sections, "6") {
			return fmt.Errorf("section %s replays what section 6 captures: run 6 first", number)
		}
		sections = append(sections, s)
	}
	cost := b.commandCost(ctx, b.cfg.pool+"/bench")
	b.notes = append(b.notes, fmt.Sprintf("budgets: 4× each section's expected zfs commands at %s each (measured), plus a minute", ms(cost)))
	unfinished := runSections(ctx, sections, func(s section) time.Duration { return budgetFor(s.number, cfg, cost) },
		func(s section, took time.Duration) {
			b.timings = append(b.timings, fmt.Sprintf("%s %.0fs", s.name, took.Seconds()))
			b.checkpoint()
		})
	b.notes = append(b.notes, unfinished...)
	defer func() {
		if len(unfinished) > 0 && err == nil {
			err = fmt.Errorf("%d sections did not finish (the table says why)", len(unfinished))
		}
	}()
	fmt.Print("\n" + b.table())
	return b.checkpoint()
}

// checkpoint writes the table as it stands, should the guest's deadline
// come before the end.
func (b *bench) checkpoint() error {
	if b.cfg.out == "" {
		return nil
	}
	return os.WriteFile(b.cfg.out, []byte(b.table()), 0o644)
}

// setup makes the parent datasets, and a directory for each daemon.
func (b *bench) setup(ctx context.Context) error {
	if err := loopbackUp(); err != nil {
		return fmt.Errorf("bringing lo up for --metrics-address: %w", err)
	}
	root := b.cfg.pool + "/bench"
	run(ctx, b.tools.zfs, "destroy", "-r", root) // a leftover, if any
	if _, _, err := run(ctx, b.tools.zfs, "create", root); err != nil {
		return err
	}
	for _, name := range []string{"count", "start", "seq", "bare", "list"} { // and scale, made by section 9
		if _, _, err := run(ctx, b.tools.zfs, "create", b.dataset(name)); err != nil {
			return err
		}
	}
	return os.MkdirAll(b.cfg.work, 0o755)
}

// daemonConfig is the configuration of the daemon of one section.
func (b *bench) daemonConfig(name string) daemonConfig {
	return daemonConfig{binary: b.cfg.binary, dir: filepath.Join(b.cfg.work, name), parent: b.dataset(name),
		extra: []string{"--log-level", b.cfg.logLevel}}
}

// interleave runs round i of a comparison: the driver's call, then the bare
// command, or the other way round on odd rounds. After the driver's call
// it waits until the daemon (if any) runs no command in the background.
func interleave(i int, d *daemon, driverSide, bareSide func() (time.Duration, error), drv, bare *samples) error {
	return interleaveSides(i, d, []side{{driverSide, drv, true}, {bareSide, bare, false}}, nil)
}

// side is one side of a comparison: what it runs, where its times go, and
// whether it is the driver's (whose background work is waited for).
type side struct {
	run    func() (time.Duration, error)
	into   *samples
	driver bool
}

// interleaveSides runs round i of a comparison of several sides in an order
// of its own (sideOrder). After the driver's side it waits until the daemon
// runs no command; when it had to wait, background (if not nil) gets how
// long: work the call left running, shown in a row of its own
// (backgroundRow).
func interleaveSides(i int, d *daemon, sides []side, background *samples) error {
	for _, k := range sideOrder(i, len(sides)) {
		s := sides[k]
		took, err := s.run()
		*s.into = append(*s.into, took)
		if s.driver && d != nil {
			start := time.Now()
			if d.quiesce() && background != nil {
				*background = append(*background, time.Since(start))
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// sideOrder is the order of round i's sides: a permutation drawn from a
// generator seeded with i (the same in every run). Each side goes first, and
// follows each other side, about as often as the others. Rotating the sides
// instead kept each side behind the same one in most rounds (with five
// sides, in four rounds of five), so that a side leaving the host busy (a
// forked zfs list, forked mount commands) weighed on the same next side
// every time.
func sideOrder(i, n int) []int {
	return rand.New(rand.NewPCG(uint64(i), 0x5eed)).Perm(n)
}

// zfsVersion is the first line of `zfs version`.
func (b *bench) zfsVersion() string {
	out, err := exec.Command(b.tools.zfs, "version").Output()
	if err != nil {
		return "zfs version unknown"
	}
	return strings.SplitN(strings.TrimSpace(string(out)), "\n", 2)[0]
}

// pluginVersion asks a daemon for its version (make build stamps it with
// git describe, so it names the commit measured).
func pluginVersion(ctx context.Context, d *daemon) string {
	info, err := d.identity.GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
	if err != nil {
		return "unknown"
	}
	return info.GetVendorVersion()
}

func (b *bench) table() string {
	title := []string{
		fmt.Sprintf("zfs-csi bench: driver %s; %s; %s, %d CPUs, kernel %s; %s",
			b.version, b.zfsVersion(), runtime.GOARCH, runtime.NumCPU(), kernel(), time.Now().UTC().Format("2006-01-02 15:04 UTC")),
		fmt.Sprintf("sequential n=%d (driver and bare interleaved), node rounds %d, %d clients × %d volumes, listing %d volumes (page %d, %d rounds), %d starts",
			b.cfg.n, b.cfg.nodeN, b.cfg.clients, b.cfg.concurrent, b.cfg.listed, b.cfg.pageSize, b.cfg.listRepeats, b.cfg.starts),
		"ratio = driver p50 / bare p50 (throughput rows: bare ops/s / driver ops/s, so > 1 means the driver is slower)",
	}
	title = append(append(title, bareSides...), "")
	var rows []row
	for _, section := range []string{"1", "2", "3", "4", "5", "6", "7", "8", "9"} {
		rows = append(rows, b.rows[section]...)
	}
	notes := append([]string{}, b.notes...)
	notes = append(notes, fmt.Sprintf("time: %s; total %.0fs", strings.Join(b.timings, ", "), time.Since(b.started).Seconds()))
	return render(title, rows, notes)
}

// bareSides is the table's header on what each bare side is.
var bareSides = []string{
	"bare sides: zfs commands are the driver's own argv (captured in section 6) on other datasets; where the driver runs a zfs",
	"  program (CreateSnapshot, DeleteSnapshot, DeleteVolume, group snapshots) a row more runs the same program bare; node mounts are",
	"  the driver's three mount(2) calls from the bench's own process, the target directory made first as publish makes it (in a",
	"  second row the forked mount commands, in a third the mounts with the reads that precede them: the ownership ioctl, the mount",
	"  table twice, a zvol held open and its size and superblock read; in a fourth those and two empty CSI calls to the daemon, the",
	"  floor; CPU rows add the bench's and the daemon's CPU time); NodeStage's ownership read (zfs.Exec.Inspect, in-process) is the",
	"  bare ZFS_IOC_OBJSET_STATS ioctl, nothing decoded, then that ioctl on /dev/zfs opened for it and in a goroutine waited for, and",
	"  the zfs list it ran before against it; listings and passes are the replay of the zfs commands the daemon logged; work a call",
	"  leaves running has a row of its own; each round's sides run in an order drawn for the round",
}

// loopbackUp brings lo up: the guest's init leaves it down, and a daemon
// with --metrics-address binds 127.0.0.1.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	request, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, request); err != nil {
		return err
	}
	request.SetUint16(request.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, request)
}

func kernel() string {
	release, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(release))
}
