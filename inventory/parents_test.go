package inventory

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
	"github.com/zfs-csi/zfs-csi/zfs/zfstest"
)

func TestCheckParents(t *testing.T) {
	cfg := rules.Config{DriverName: "zfs.csi.dev", ParentDatasets: []string{"tank/csi", "fast/csi"}}
	setup := func(t *testing.T) *zfstest.Fake {
		f := zfstest.NewFake(map[string]uint64{"tank": 10 << 30, "fast": 10 << 30})
		for _, name := range cfg.ParentDatasets {
			if err := f.Create(context.Background(), name, zfs.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		return f
	}
	t.Run("healthy parents pass with one zfs list and one zpool list per pool", func(t *testing.T) {
		f := setup(t)
		f.ResetCalls()
		if err := CheckParents(context.Background(), f, cfg); err != nil {
			t.Fatal(err)
		}
		if calls := f.Calls(); calls["List"] != 1 || calls["Pool"] != 2 {
			t.Errorf("calls %v", calls)
		}
	})
	for _, test := range []struct {
		name  string
		spoil func(f *zfstest.Fake) error
		want  string
	}{
		{"a missing parent", func(f *zfstest.Fake) error { return f.Destroy(context.Background(), "fast/csi", zfs.DestroyOptions{}) },
			"parent dataset fast/csi does not exist"},
		{"a parent carrying the managed mark", func(f *zfstest.Fake) error {
			return f.Set(context.Background(), "tank/csi", map[string]string{rules.NewUserProps(cfg.DriverName).Managed: "true"})
		}, "parent dataset tank/csi carries"},
		{"a faulted pool", func(f *zfstest.Fake) error { f.SetPoolHealth("fast", "FAULTED"); return nil }, "pool fast is FAULTED"},
	} {
		t.Run(test.name+" is refused", func(t *testing.T) {
			f := setup(t)
			if err := test.spoil(f); err != nil {
				t.Fatal(err)
			}
			if err := CheckParents(context.Background(), f, cfg); err == nil || !strings.Contains(err.Error(), test.want) {
				t.Errorf("got %v, want %q", err, test.want)
			}
		})
	}
	t.Run("the pools are asked while the parents are listed, not after", func(t *testing.T) {
		z := &listAfterPool{Fake: setup(t), asked: make(chan struct{}, 2)}
		if err := CheckParents(context.Background(), z, cfg); err != nil {
			t.Fatal(err)
		}
	})
}

// listAfterPool lets List answer only once Pool has been asked, or fails it
// after a second: a CheckParents that asks the pools after the listing fails.
type listAfterPool struct {
	*zfstest.Fake
	asked chan struct{}
}

func (z *listAfterPool) Pool(ctx context.Context, name string) (zfs.Pool, error) {
	z.asked <- struct{}{}
	return z.Fake.Pool(ctx, name)
}

func (z *listAfterPool) List(ctx context.Context, opts zfs.ListOptions) ([]zfs.Dataset, error) {
	select {
	case <-z.asked:
		return z.Fake.List(ctx, opts)
	case <-time.After(time.Second):
		return nil, context.DeadlineExceeded
	}
}
