package zfs

import (
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"
)

var csiProps = []string{"zfs.csi.dev:csi-name", "zfs.csi.dev:managed"}

func listColumns(userProps ...string) string {
	columns := datasetColumns
	for _, prop := range userProps {
		columns += "," + prop
	}
	return columns
}

func TestListRunsZFSListWithFixedColumnsTypesAndDepth(t *testing.T) {
	tests := []struct {
		name string
		opts ListOptions
		want []string
	}{
		{"Depth 0 lists exactly the roots with -d 0, filesystems and volumes by default",
			ListOptions{Roots: []string{"tank/csi/pvc-a", "tank/csi/pvc-b"}},
			[]string{"list", "-H", "-p", "-o", listColumns(), "-t", "filesystem,volume", "-d", "0",
				"tank/csi/pvc-a", "tank/csi/pvc-b"}},
		{"A positive depth becomes -d N and user properties follow the fixed columns",
			ListOptions{Roots: []string{"tank/csi"}, Depth: 1, Types: []Type{Snapshot}, UserProps: csiProps},
			[]string{"list", "-H", "-p", "-o", listColumns(csiProps...), "-t", "snapshot", "-d", "1", "tank/csi"}},
		{"Depth -1 recurses without limit",
			ListOptions{Roots: []string{"tank/csi"}, Depth: -1, Types: []Type{Filesystem, Volume, Snapshot}},
			[]string{"list", "-H", "-p", "-o", listColumns(), "-t", "filesystem,volume,snapshot", "-r", "tank/csi"}},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			fake := newFakeZFS(t)
			if _, err := NewExec(ExecConfig{}).List(t.Context(), test.opts); err != nil {
				t.Fatal(err)
			}
			if got := fake.argv("zfs.list"); !slices.Equal(got, test.want) {
				t.Errorf("argv\n got %q\nwant %q", got, test.want)
			}
		})
	}
}

func TestListRefusesOptionsZFSWouldMisread(t *testing.T) {
	tests := []struct {
		name string
		opts ListOptions
	}{
		{"no roots would list every dataset on the host", ListOptions{}},
		{"a depth below -1 means nothing", ListOptions{Roots: []string{"tank"}, Depth: -2}},
		{"bookmarks are not a type this package parses", ListOptions{Roots: []string{"tank"}, Types: []Type{"bookmark"}}},
		{"a native property is not a user property", ListOptions{Roots: []string{"tank"}, UserProps: []string{"used"}}},
		{"a comma would add a column we do not parse", ListOptions{Roots: []string{"tank"}, UserProps: []string{"a:b,used"}}},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			newFakeZFS(t)
			if _, err := NewExec(ExecConfig{}).List(t.Context(), test.opts); !errors.Is(err, ErrInvalid) {
				t.Errorf("err = %v, want ErrInvalid", err)
			}
		})
	}
}

// long: a table of recorded zfs list outputs, one a row
func TestListParsesRecordedOutput(t *testing.T) {
	created := func(seconds int64) time.Time { return time.Unix(seconds, 0).UTC() }
	user := func(csiName, managed string) map[string]string {
		values := map[string]string{"zfs.csi.dev:csi-name": csiName, "zfs.csi.dev:managed": managed}
		for prop, value := range values {
			if value == "" {
				delete(values, prop)
			}
		}
		return values
	}
	tests := []struct {
		name     string
		testdata string
		rows     []string  // every row's name, in order
		want     []Dataset // some rows in full
	}{
		{"filesystems have a refquota, clones an origin, and unset user properties are absent",
			"list-filesystems.txt",
			[]string{"tank/csi", "tank/csi/pvc-a", "tank/csi/pvc-c", "tank/csi/pvc-d", "tank/csi/pvc-e", "tank/csi/pvc-ro"},
			[]Dataset{
				{Name: "tank/csi", Type: Filesystem, Used: 1092714496, Referenced: 24576, Available: 6708374528,
					LogicalUsed: 49152, Creation: created(1795317107)},
				{Name: "tank/csi/pvc-a", Type: Filesystem, Used: 24576, Referenced: 24576, Available: 1073717248,
					LogicalUsed: 12288, RefQuota: 1073741824, Creation: created(1795317108), User: user("pvc-a", "true")},
				{Name: "tank/csi/pvc-d", Type: Filesystem, Origin: "tank/csi/pvc-a@snap-1", Referenced: 24576,
					Available: 6708374528, Creation: created(1795317114), User: user("pvc-d", "false")},
				{Name: "tank/csi/pvc-ro", Type: Filesystem, Used: 24576, Referenced: 24576, Available: 6708374528,
					LogicalUsed: 12288, Creation: created(1795317111), ReadOnly: true, User: user("pvc-ro", "")},
			}},
		{"volumes have a volsize, a volblocksize and a refreservation unless sparse",
			"list-volumes.txt",
			[]string{"tank/csi/pvc-b", "tank/csi/pvc-thin"},
			[]Dataset{
				{Name: "tank/csi/pvc-b", Type: Volume, Used: 1092628480, Referenced: 12288, Available: 7800990720,
					LogicalUsed: 6144, RefReservation: 1092616192, VolSize: 1073741824, VolBlockSize: 16384,
					Creation: created(1795317109), User: user("pvc-b", "true")},
				{Name: "tank/csi/pvc-thin", Type: Volume, Used: 12288, Referenced: 12288, Available: 6708374528,
					LogicalUsed: 6144, VolSize: 2147483648, VolBlockSize: 16384, Creation: created(1795317110),
					User: user("pvc-thin", "true")},
			}},
		{"snapshots list their clones and whether their destroy is deferred",
			"list-snapshots.txt",
			[]string{"tank/csi/pvc-a@snap-1", "tank/csi/pvc-a@snap-2", "tank/csi/pvc-b@snap-3"},
			[]Dataset{
				{Name: "tank/csi/pvc-a@snap-1", Type: Snapshot, Referenced: 24576, Creation: created(1795317112),
					Clones: []string{"tank/csi/pvc-d", "tank/csi/pvc-c"}, User: user("snap-1", "true")},
				{Name: "tank/csi/pvc-a@snap-2", Type: Snapshot, Referenced: 24576, Creation: created(1795317113),
					Clones: []string{"tank/csi/pvc-e"}, DeferDestroy: true, User: user("snap-2", "true")},
				{Name: "tank/csi/pvc-b@snap-3", Type: Snapshot, Referenced: 12288, VolSize: 1073741824,
					Creation: created(1795317113), User: user("snap-3", "true")},
			}},
		{"all types come sorted by name with snapshots right after their dataset",
			"list-all.txt",
			[]string{"tank/csi", "tank/csi/pvc-a", "tank/csi/pvc-a@snap-1", "tank/csi/pvc-a@snap-2",
				"tank/csi/pvc-b", "tank/csi/pvc-b@snap-3", "tank/csi/pvc-c", "tank/csi/pvc-d", "tank/csi/pvc-e",
				"tank/csi/pvc-ro", "tank/csi/pvc-thin"},
			nil},
		{"a received copy keeps the received snapshot and the -o properties",
			"list-received.txt",
			[]string{"tank/csi/pvc-copy", "tank/csi/pvc-copy@snap-1"},
			[]Dataset{
				{Name: "tank/csi/pvc-copy", Type: Filesystem, Used: 24576, Referenced: 24576, Available: 6706458624,
					LogicalUsed: 12288, Creation: created(1795317187), User: user("", "true")},
				{Name: "tank/csi/pvc-copy@snap-1", Type: Snapshot, Referenced: 24576, Creation: created(1795317112),
					User: user("", "true")},
			}},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			fake := newFakeZFS(t)
			fake.setFile("zfs.list", "stdout", test.testdata)
			got, err := NewExec(ExecConfig{}).List(t.Context(), ListOptions{
				Roots: []string{"tank/csi"}, Depth: -1, UserProps: csiProps})
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			byName := map[string]Dataset{}
			for _, dataset := range got {
				names = append(names, dataset.Name)
				byName[dataset.Name] = dataset
			}
			if !slices.Equal(names, test.rows) {
				t.Errorf("rows %q, want %q", names, test.rows)
			}
			for _, want := range test.want {
				if !reflect.DeepEqual(byName[want.Name], want) {
					t.Errorf("got\n%+v\nwant\n%+v", byName[want.Name], want)
				}
			}
		})
	}
}

func TestListWithSpaceReadsUsedBySnapshotsAndCompressRatio(t *testing.T) {
	fake := newFakeZFS(t)
	fake.set("zfs.list", "stdout", "tank/csi/pvc-a\tfilesystem\t-\t49152\t24576\t1073717248\t12288\t1073741824\t0\t-\t-\t1795317108\toff\t-\t-\t24576\t2.35\tpvc-a\ttrue\n"+
		"tank/csi/pvc-b\tvolume\t-\t12288\t12288\t6708374528\t6144\t-\t0\t2147483648\t16384\t1795317110\toff\t-\t-\t0\t1.00x\tpvc-b\ttrue\n")
	rows, err := NewExec(ExecConfig{}).List(t.Context(), ListOptions{Roots: []string{"tank/csi"}, Depth: 1, UserProps: csiProps, Space: true})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"list", "-H", "-p", "-o", datasetColumns + ",usedbysnapshots,compressratio," + csiProps[0] + "," + csiProps[1],
		"-t", "filesystem,volume", "-d", "1", "tank/csi"}
	if argv := fake.argv("zfs.list"); !slices.Equal(argv, want) {
		t.Errorf("argv\n got %q\nwant %q", argv, want)
	}
	if len(rows) != 2 || rows[0].UsedBySnapshots != 24576 || rows[0].CompressRatio != 2.35 ||
		rows[0].User["zfs.csi.dev:csi-name"] != "pvc-a" || rows[1].CompressRatio != 1 {
		t.Errorf("rows = %+v", rows)
	}
}

func TestListRejectsRowsBrokenByTabsOrNewlinesInValues(t *testing.T) {
	fake := newFakeZFS(t)
	fake.setFile("zfs.list", "stdout", "list-tab-and-newline-in-values.txt")
	_, err := NewExec(ExecConfig{}).List(t.Context(), ListOptions{Roots: []string{"tank/csi"}, UserProps: csiProps})
	if err == nil {
		t.Fatal("rows with a tab and a newline inside user property values parsed without error")
	}
}

// suspendedStderr is what zfs list (2.3, measured in the guest) says of one
// root missing and one in a pool whose I/O is suspended.
const suspendedStderr = "cannot open 'tank/csi/pvc-gone': dataset does not exist\n" +
	"cannot open 'other/csi': pool I/O is currently suspended\n"

func TestListWithMissingRoots(t *testing.T) {
	tests := []struct {
		name          string
		skipMissing   bool
		skipSuspended bool
		stderr        string
		wantRows      int
		wantErr       error
	}{
		{"without SkipMissing a missing root is ErrNotFound", false, false, "", 0, ErrNotFound},
		{"with SkipMissing the existing roots are listed", true, false, "", 2, nil},
		{"with SkipMissing any other complaint is still an error", true, false, suspendedStderr, 0, ErrPoolSuspended},
		{"with SkipSuspended a suspended pool's root is no error", true, true, suspendedStderr, 2, nil},
		{"SkipSuspended alone leaves a missing root an error", false, true, suspendedStderr, 0, ErrNotFound},
		{"with SkipSuspended an I/O error is still an error", true, true,
			"cannot open 'tank/csi/pvc-b': I/O error\n", 0, ErrIO},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			fake := newFakeZFS(t)
			fake.setFile("zfs.list", "stdout", "list-partial.txt")
			fake.setFile("zfs.list", "stderr", "list-partial.stderr")
			if test.stderr != "" {
				fake.set("zfs.list", "stderr", test.stderr)
			}
			fake.set("zfs.list", "exit", "1")
			rows, err := NewExec(ExecConfig{}).List(t.Context(), ListOptions{
				Roots:         []string{"tank/csi/pvc-a", "tank/csi/pvc-gone", "tank/csi/pvc-b", "tank/csi/pvc-lost@snap-9"},
				Types:         []Type{Filesystem, Volume, Snapshot},
				UserProps:     csiProps,
				SkipMissing:   test.skipMissing,
				SkipSuspended: test.skipSuspended,
			})
			if !errors.Is(err, test.wantErr) || (test.wantErr == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, test.wantErr)
			}
			if len(rows) != test.wantRows {
				t.Errorf("got %d rows, want %d", len(rows), test.wantRows)
			}
		})
	}
}

func TestGetFindsASnapshotThroughList(t *testing.T) {
	fake := newFakeZFS(t)
	fake.setFile("zfs.list", "stdout", "list-clone.txt")
	got, err := Get(t.Context(), NewExec(ExecConfig{}), "tank/csi/pvc-c", csiProps)
	if err != nil || got.Origin != "tank/csi/pvc-a@snap-1" {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	want := []string{"list", "-H", "-p", "-o", listColumns(csiProps...), "-t", "filesystem,volume,snapshot",
		"-d", "0", "tank/csi/pvc-c"}
	if argv := fake.argv("zfs.list"); !slices.Equal(argv, want) {
		t.Errorf("argv\n got %q\nwant %q", argv, want)
	}
}

func TestPool(t *testing.T) {
	tests := []struct {
		name     string
		testdata string
		want     Pool
	}{
		{"reports sizes in bytes", "zpool-list.txt",
			Pool{Name: "tank", Health: "ONLINE", Size: 8053063680, Allocated: 560640, Free: 8052503040}},
		{"reads fragmentation '-' as 0", "zpool-list-no-fragmentation.txt",
			Pool{Name: "tank", Health: "DEGRADED", Size: 8455716864, Allocated: 1118208, Free: 8454598656}},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			fake := newFakeZFS(t)
			fake.setFile("zpool.list", "stdout", test.testdata)
			got, err := NewExec(ExecConfig{}).Pool(t.Context(), "tank")
			if err != nil || got != test.want {
				t.Fatalf("Pool = %+v, %v; want %+v", got, err, test.want)
			}
			want := []string{"list", "-H", "-p", "-o", "name,health,size,allocated,free,fragmentation", "tank"}
			if argv := fake.argv("zpool.list"); !slices.Equal(argv, want) {
				t.Errorf("argv %q, want %q", argv, want)
			}
		})
	}
}

func TestPoolThatDoesNotExistIsErrPoolNotFound(t *testing.T) {
	fake := newFakeZFS(t)
	fake.fail("zpool.list", "cannot open 'nopool': no such pool\n")
	if _, err := NewExec(ExecConfig{}).Pool(t.Context(), "nopool"); !errors.Is(err, ErrPoolNotFound) {
		t.Errorf("err = %v, want ErrPoolNotFound", err)
	}
}

func TestParsePoolAcceptsAPercentSign(t *testing.T) {
	pool, err := parsePool([]byte("tank\tONLINE\t100\t40\t60\t12%\n"))
	if err != nil || pool.Fragmentation != 12 {
		t.Errorf("parsePool = %+v, %v", pool, err)
	}
}
