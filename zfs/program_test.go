package zfs

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestDestroyGuardedRunsOneChannelProgramFromStdin(t *testing.T) {
	f := newFakeZFS(t)
	f.set("zfs.program", "read-stdin", "")
	f.set("zfs.program", "stdout", `{"return": {"outcome": "done", "type": "filesystem", "origin": "tank/csi/a@s", "marked": true}}`)
	result, err := NewExec(ExecConfig{}).DestroyGuarded(context.Background(), DestroyRequest{Name: "tank/csi/v",
		Guard: Guard{Owned: "x:managed", Excluded: "x:deleted"}, Keep: []string{"x:snapshot-name"},
		OriginMarks: []string{"x:internal", "x:deleted"}})
	if err != nil {
		t.Fatal(err)
	}
	if result != (DestroyResult{Outcome: Done, Type: Filesystem, Origin: "tank/csi/a@s", OriginMarked: true}) {
		t.Errorf("got %+v", result)
	}
	want := []string{"program", "-j", "--", "tank", "-", "tank/csi/v", "x:managed", "x:deleted", "x:snapshot-name", "--",
		"x:internal", "x:deleted"}
	if got := f.argv("zfs.program"); !slices.Equal(got, want) {
		t.Errorf("argv %q, want %q", got, want)
	}
	if stdin, _ := f.recorded("zfs.program", "stdin"); stdin != destroyProgram {
		t.Errorf("the script on stdin is not destroyProgram:\n%s", stdin)
	}
}

func TestGuardedOutcomesAndErrnosAreTyped(t *testing.T) {
	tests := []struct {
		name, stdout string
		want         Outcome
		wantErr      error
	}{
		{"a missing dataset is ErrNotFound", `{"return": {"outcome": "absent"}}`, "", ErrNotFound},
		{"EBUSY from zfs.sync.destroy is ErrBusy", `{"return": {"outcome": "failed", "type": "volume", "errno": 16, "at": "tank/csi/v"}}`, "", ErrBusy},
		{"a volume with dependents is held", `{"return": {"outcome": "held", "type": "volume"}}`, Held, nil},
		{"a dataset without the mark is not owned", `{"return": {"outcome": "not-owned", "type": "filesystem"}}`, NotOwned, nil},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			f := newFakeZFS(t)
			f.set("zfs.program", "stdout", test.stdout)
			result, err := NewExec(ExecConfig{}).DestroyGuarded(context.Background(), DestroyRequest{Name: "tank/csi/v", Guard: Guard{Owned: "x:managed"}})
			if !errors.Is(err, test.wantErr) || (test.wantErr == nil && err != nil) {
				t.Fatalf("got %v, want %v", err, test.wantErr)
			}
			if result.Outcome != test.want {
				t.Errorf("outcome %q, want %q", result.Outcome, test.want)
			}
			if !strings.Contains(test.stdout, `"type"`) == (result.Type != "") {
				t.Errorf("type %q: the caller needs the type the program reported", result.Type)
			}
		})
	}
	t.Run("output that is not the JSON of a result is an error", func(t *testing.T) {
		f := newFakeZFS(t)
		f.set("zfs.program", "stdout", "Channel program fully executed and did not produce output.\n")
		if _, err := NewExec(ExecConfig{}).DestroyGuarded(context.Background(), DestroyRequest{Name: "tank/csi/v", Guard: Guard{Owned: "x:managed"}}); err == nil {
			t.Error("no error")
		}
	})
	t.Run("a failing program is a classified CommandError", func(t *testing.T) {
		f := newFakeZFS(t)
		f.fail("zfs.program", "cannot open pool 'tank'\n")
		_, err := NewExec(ExecConfig{}).DestroyGuarded(context.Background(), DestroyRequest{Name: "tank/csi/v", Guard: Guard{Owned: "x:managed"}})
		var commandErr *CommandError
		if !errors.As(err, &commandErr) {
			t.Errorf("got %v", err)
		}
	})
}

func TestSnapshotGuardedPassesItsRequestAndReadsTheSnapshot(t *testing.T) {
	f := newFakeZFS(t)
	f.set("zfs.program", "read-stdin", "")
	f.set("zfs.program", "stdout", `{"return": {"outcome": "done", "name": "tank/csi/v@s", "referenced": 4096, "creation": 1700000000,`+
		` "type": "volume", "volsize": 1073741824, "volblocksize": 65536, "reported": "ext4", "size": "1073741824"}}`)
	var labels []string
	exec := NewExec(ExecConfig{OnCommand: func(subcommand string, _ time.Duration, _ error) { labels = append(labels, subcommand) }})
	result, err := exec.SnapshotGuarded(context.Background(), SnapshotRequest{Name: "tank/csi/v@s",
		Properties: map[string]string{"x:snapshot-name": "my snap", "x:b": "2"}, Guard: Guard{Owned: "x:managed", Excluded: "x:deleted"},
		Unique: "x:snapshot-name", Others: []string{"tank/csi/w@t"}, Report: "x:fstype", SizeProperty: "x:size", Internal: "x:internal", Pending: "x:snapshotting"})
	if err != nil {
		t.Fatal(err)
	}
	want := Dataset{Name: "tank/csi/v@s", Type: Snapshot, Referenced: 4096, Creation: time.Unix(1700000000, 0)}
	if result.Outcome != Done || !result.Snapshot.Creation.Equal(want.Creation) || result.Snapshot.Name != want.Name || result.Snapshot.Referenced != want.Referenced {
		t.Errorf("got %+v", result)
	}
	if v := result.Volume; v.Name != "tank/csi/v" || v.Type != Volume || v.VolSize != 1<<30 || v.VolBlockSize != 64<<10 ||
		v.User["x:fstype"] != "ext4" || result.Snapshot.VolSize != 1<<30 || result.Snapshot.User["x:size"] != "1073741824" {
		t.Errorf("the snapshotted volume as the program saw it: got %+v (snapshot volsize %d)", v, result.Snapshot.VolSize)
	}
	wantArgv := []string{"program", "-j", "--", "tank", "-", "tank/csi/v@s", "tank/csi/v", "x:managed", "x:deleted", "x:snapshot-name", "x:fstype",
		"x:size", "x:internal", "x:snapshotting", "tank/csi/w@t", "--", "x:b", "2", "x:snapshot-name", "my snap"}
	if got := f.argv("zfs.program"); !slices.Equal(got, wantArgv) {
		t.Errorf("argv %q, want %q", got, wantArgv)
	}
	if stdin, _ := f.recorded("zfs.program", "stdin"); stdin != snapshotProgram {
		t.Errorf("the script on stdin is not snapshotProgram")
	}
	if !slices.Equal(labels, []string{"program snapshot"}) {
		t.Errorf("OnCommand saw %q", labels)
	}

	f.set("zfs.program", "stdout", `{"return": {"outcome": "taken", "name": "tank/csi/w@t", "type": "filesystem", "refquota": 5}}`)
	if result, err := exec.SnapshotGuarded(context.Background(), SnapshotRequest{Name: "tank/csi/v@s",
		Properties: map[string]string{"x:n": "a"}, Unique: "x:n"}); err != nil || result.Outcome != Taken || result.Volume.Name != "" {
		t.Errorf("taken elsewhere: got %+v, %v; Volume is only for the snapshotted dataset", result, err)
	}

	f.set("zfs.program", "stdout", `{"return": {"outcome": "unsupported"}}`)
	if _, err := exec.SnapshotGuarded(context.Background(), SnapshotRequest{Name: "tank/csi/v@s",
		Properties: map[string]string{"x:n": "a"}, Unique: "x:n"}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("got %v, want ErrUnsupported", err)
	}
	if _, err := exec.SnapshotGuarded(context.Background(), SnapshotRequest{Name: "tank/csi/v@s", Unique: "x:n"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("a unique property that is not set: got %v, want ErrInvalid", err)
	}
}

func TestDestroySnapshotGuardedPassesItsRequestAndReadsTheMark(t *testing.T) {
	f := newFakeZFS(t)
	f.set("zfs.program", "read-stdin", "")
	f.set("zfs.program", "stdout", `{"return": {"outcome": "done", "reported": "true"}}`)
	var labels []string
	exec := NewExec(ExecConfig{OnCommand: func(subcommand string, _ time.Duration, _ error) { labels = append(labels, subcommand) }})
	result, err := exec.DestroySnapshotGuarded(context.Background(), SnapshotDestroyRequest{Name: "tank/csi/v@s",
		Named: "x:snapshot-name", Excluded: "x:internal", Report: "x:deleted", Refused: "x:group"})
	if err != nil {
		t.Fatal(err)
	}
	if result != (SnapshotDestroyResult{Outcome: Done, Reported: "true"}) {
		t.Errorf("got %+v", result)
	}
	want := []string{"program", "-j", "--", "tank", "-", "tank/csi/v@s", "x:snapshot-name", "x:internal", "x:deleted", "x:group"}
	if got := f.argv("zfs.program"); !slices.Equal(got, want) {
		t.Errorf("argv %q, want %q", got, want)
	}
	if stdin, _ := f.recorded("zfs.program", "stdin"); stdin != destroySnapshotProgram {
		t.Errorf("the script on stdin is not destroySnapshotProgram")
	}
	if !slices.Equal(labels, []string{"program destroy-snapshot"}) {
		t.Errorf("OnCommand saw %q", labels)
	}
	f.set("zfs.program", "stdout", `{"return": {"outcome": "not-owned"}}`)
	if result, err := exec.DestroySnapshotGuarded(context.Background(), SnapshotDestroyRequest{Name: "tank/csi/v@s", Named: "x:n"}); err != nil || result.Outcome != NotOwned {
		t.Errorf("got %+v, %v, want not-owned", result, err)
	}
	for _, bad := range []SnapshotDestroyRequest{{Name: "tank/csi/v", Named: "x:n"}, {Name: "tank/csi/v@s"}} {
		if _, err := exec.DestroySnapshotGuarded(context.Background(), bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: got %v, want ErrInvalid", bad, err)
		}
	}
}

// One property is one `zfs inherit`; several are the inherit program, in
// the order given (the caller's last is the one whose going says the rest
// went).
func TestInheritOfSeveralPropertiesIsOneProgram(t *testing.T) {
	f := newFakeZFS(t)
	f.set("zfs.program", "read-stdin", "")
	f.set("zfs.program", "stdout", `{"return": {"outcome": "done"}}`)
	e := NewExec(ExecConfig{})
	if err := e.Inherit(context.Background(), "tank/csi/v", "x:csi-name", "x:managed"); err != nil {
		t.Fatal(err)
	}
	if got, want := f.argv("zfs.program"), []string{"program", "-j", "--", "tank", "-", "tank/csi/v", "x:csi-name", "x:managed"}; !slices.Equal(got, want) {
		t.Errorf("argv %q, want %q", got, want)
	}
	if stdin, _ := f.recorded("zfs.program", "stdin"); stdin != inheritProgram {
		t.Errorf("the script on stdin is not inheritProgram:\n%s", stdin)
	}
	if err := e.Inherit(context.Background(), "tank/csi/v", "x:managed"); err != nil {
		t.Fatal(err)
	}
	if got, want := f.argv("zfs.inherit"), []string{"inherit", "x:managed", "tank/csi/v"}; !slices.Equal(got, want) {
		t.Errorf("argv %q, want %q", got, want)
	}
	if err := e.Inherit(context.Background(), "tank/csi/v", "x:a", "-r"); !errors.Is(err, ErrInvalid) {
		t.Errorf("an option for a property: %v, want ErrInvalid", err)
	}
	f.set("zfs.program", "stdout", `{"return": {"outcome": "failed", "errno": 22, "at": "tank/csi/v refquota"}}`)
	if err := e.Inherit(context.Background(), "tank/csi/v", "x:a", "refquota"); !errors.Is(err, ErrInvalid) {
		t.Errorf("a property that cannot go: %v, want ErrInvalid", err)
	}
}
