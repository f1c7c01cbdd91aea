package inventory

import (
	"context"
	"fmt"
	"slices"

	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// CheckParents reports the first reason the parent datasets cannot hold
// volumes: one is missing or not a filesystem, one carries the driver's
// managed mark (its children would all inherit it, and the driver could no
// longer tell its volumes from others), or its pool is not ONLINE or DEGRADED.
// It costs one zfs list plus one zpool list per pool, run at once: the pools
// follow from the parents' names, so nothing waits for the listing.
func CheckParents(ctx context.Context, z zfs.Interface, cfg rules.Config) error {
	props := rules.NewUserProps(cfg.DriverName)
	var pools []string
	for _, parent := range cfg.ParentDatasets {
		if pool := zfs.PoolOf(parent); !slices.Contains(pools, pool) {
			pools = append(pools, pool)
		}
	}
	type poolResult struct {
		pool zfs.Pool
		err  error
	}
	results := make([]chan poolResult, len(pools))
	for i, name := range pools {
		results[i] = make(chan poolResult, 1)
		go func() {
			pool, err := z.Pool(ctx, name)
			results[i] <- poolResult{pool, err}
		}()
	}
	rows, err := z.List(ctx, zfs.ListOptions{Roots: cfg.ParentDatasets, UserProps: []string{props.Managed}, SkipMissing: true})
	if err != nil {
		return fmt.Errorf("listing parent datasets: %w", err)
	}
	found := map[string]zfs.Dataset{}
	for _, row := range rows {
		found[row.Name] = row
	}
	for _, parent := range cfg.ParentDatasets {
		row, ok := found[parent]
		switch {
		case !ok:
			return fmt.Errorf("parent dataset %s does not exist (create it with: zfs create %s)", parent, parent)
		case row.Type != zfs.Filesystem:
			return fmt.Errorf("parent dataset %s is a %s, not a filesystem", parent, row.Type)
		case row.User[props.Managed] != "":
			return fmt.Errorf("parent dataset %s carries %s=%s; remove it (zfs inherit %s %s)",
				parent, props.Managed, row.User[props.Managed], props.Managed, parent)
		}
	}
	for i, name := range pools {
		result := <-results[i]
		if result.err != nil {
			return fmt.Errorf("pool %s: %w", name, result.err)
		}
		if pool := result.pool; pool.Health != "ONLINE" && pool.Health != "DEGRADED" {
			return fmt.Errorf("pool %s is %s", name, pool.Health)
		}
	}
	return nil
}
