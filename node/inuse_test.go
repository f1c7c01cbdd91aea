package node_test

import "testing"

// InUse is what adoption, release and a move's final round ask: a volume
// staged or published is in use, one that is not is free, and a mount at a
// mountpoint the caller excepts (ZFS's own, at the filesystem's mountpoint)
// does not count.
func TestInUseSeesTheVolumesMountsButNotTheExceptedOnes(t *testing.T) {
	h := newHarness(t)
	v := h.volume("data", "zfs")
	other := h.volume("other", "zfs")
	inUse := func(v *testVolume, except ...string) bool {
		t.Helper()
		used, err := h.server.InUse(v.dataset, except...)
		if err != nil {
			t.Fatal(err)
		}
		return used
	}
	if inUse(v) {
		t.Error("a volume nothing mounted is in use")
	}
	h.mustStageAndPublish(v)
	if !inUse(v) {
		t.Error("a staged and published volume is not in use")
	}
	if inUse(other) {
		t.Error("another volume's mounts make this one in use")
	}
	if !inUse(v, v.staging) {
		t.Error("excepting the staging path hides the publish")
	}
	if inUse(v, v.staging, v.target) {
		t.Error("the excepted mounts still count")
	}
}
