package zfs

import (
	"context"
	"errors"
	"slices"
	"testing"
)

func TestSnapshotGroupRunsOneChannelProgramAndReadsEveryMember(t *testing.T) {
	f := newFakeZFS(t)
	f.set("zfs.program", "read-stdin", "")
	f.set("zfs.program", "stdout", `{"return": {"outcome": "done", "members": {
		"tank/csi/a": {"referenced": 4096, "creation": 1700000000, "createtxg": 77, "type": "filesystem", "refquota": 1048576, "size": "1048576"},
		"tank/csi/b": {"referenced": 8192, "creation": 1700000000, "createtxg": 77, "type": "volume", "volsize": 2097152, "volblocksize": 16384, "size": "2097152"}}}}`)
	req := GroupSnapshotRequest{Datasets: []string{"tank/csi/a", "tank/csi/b"}, Snapshot: "g", Guard: Guard{Owned: "x:managed", Excluded: "x:deleted"},
		Group: "x:group", Name: "group-1", Named: "x:snapshot-name", SizeProperty: "x:size", Parents: []string{"tank/csi"},
		Others: []string{"tank/csi/c@g"}, Pending: "x:snapshotting", CountProperty: "x:members"}
	result, err := NewExec(ExecConfig{}).SnapshotGroup(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"program", "-j", "--", "tank", "-", "g", "x:managed", "x:deleted", "x:group", "group-1", "x:snapshot-name", "x:size",
		"x:snapshotting", "x:members", "tank/csi/a", "tank/csi/b", "--", "tank/csi", "--", "tank/csi/c@g"}
	if got := f.argv("zfs.program"); !slices.Equal(got, want) {
		t.Errorf("argv %q, want %q", got, want)
	}
	if stdin, _ := f.recorded("zfs.program", "stdin"); stdin != groupSnapshotProgram {
		t.Errorf("the script on stdin is not groupSnapshotProgram")
	}
	if result.Outcome != Done || len(result.Members) != 2 {
		t.Fatalf("got %+v", result)
	}
	a, b := result.Members[0], result.Members[1]
	if a.Name != "tank/csi/a@g" || a.CreateTxg != 77 || a.User["x:size"] != "1048576" || a.Referenced != 4096 ||
		b.Name != "tank/csi/b@g" || b.VolSize != 2097152 || result.Volumes[1].Type != Volume || result.Volumes[1].VolBlockSize != 16384 ||
		result.Volumes[0].RefQuota != 1048576 {
		t.Errorf("members %+v, volumes %+v", result.Members, result.Volumes)
	}
}

func TestSnapshotGroupRefusesWhatOneProgramCannotDo(t *testing.T) {
	exec := NewExec(ExecConfig{})
	for _, test := range []struct {
		name    string
		req     GroupSnapshotRequest
		wantErr error
	}{
		{"datasets of two pools", GroupSnapshotRequest{Datasets: []string{"tank/csi/a", "fast/csi/b"}, Snapshot: "g", Group: "x:g", Name: "n", Named: "x:n"}, ErrCrossPool},
		{"no datasets", GroupSnapshotRequest{Snapshot: "g", Group: "x:g", Name: "n", Named: "x:n"}, ErrInvalid},
		{"a snapshot among the datasets", GroupSnapshotRequest{Datasets: []string{"tank/csi/a@s"}, Snapshot: "g", Group: "x:g", Name: "n", Named: "x:n"}, ErrInvalid},
	} {
		t.Run(test.name, func(t *testing.T) {
			if _, err := exec.SnapshotGroup(context.Background(), test.req); !errors.Is(err, test.wantErr) {
				t.Errorf("got %v, want %v", err, test.wantErr)
			}
		})
	}
}

func TestProgramsSetPropertiesAsksZFS(t *testing.T) {
	for outcome, want := range map[string]bool{"done": true, "unsupported": false} {
		f := newFakeZFS(t)
		f.set("zfs.program", "read-stdin", "")
		f.set("zfs.program", "stdout", `{"return": {"outcome": "`+outcome+`"}}`)
		got, err := NewExec(ExecConfig{}).ProgramsSetProperties(context.Background(), "tank")
		if err != nil || got != want {
			t.Errorf("%s: got %v, %v", outcome, got, err)
		}
	}
}
