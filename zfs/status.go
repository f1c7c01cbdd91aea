package zfs

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
)

// PoolStatus is what `zpool status` says of a pool's health beyond its
// state: the error counters of its vdevs and the data errors ZFS knows of.
type PoolStatus struct {
	Name  string
	State string // ONLINE, DEGRADED, FAULTED, SUSPENDED, …
	// ReadErrors, WriteErrors and ChecksumErrors are summed over the pool
	// and every vdev.
	ReadErrors, WriteErrors, ChecksumErrors uint64
	// DataErrors counts the blocks ZFS could not repair ("errors: N data
	// errors"): data lost, not only at risk.
	DataErrors uint64
	// Unhealthy names the vdevs that are not ONLINE, with their state
	// ("mirror-0 DEGRADED").
	Unhealthy []string
}

// PoolStatus implements Interface with one `zpool status -p`.
func (e *Exec) PoolStatus(ctx context.Context, name string) (PoolStatus, error) {
	if err := checkNames(name); err != nil {
		return PoolStatus{}, err
	}
	out, err := e.run(ctx, []string{e.cfg.ZpoolPath, "status", "-p", name})
	if err != nil {
		return PoolStatus{}, err
	}
	return parsePoolStatus(name, out)
}

// parsePoolStatus reads the state line, the config table (NAME STATE READ
// WRITE CKSUM, then one row per vdev, indented) and the errors line.
func parsePoolStatus(name string, out []byte) (PoolStatus, error) {
	status := PoolStatus{Name: name}
	scanner := bufio.NewScanner(bytes.NewReader(out))
	inTable, sawTable, sawErrors := false, false, false
	for scanner.Scan() {
		line := scanner.Text()
		trimmed := strings.TrimSpace(line)
		fields := strings.Fields(trimmed)
		switch {
		case strings.HasPrefix(trimmed, "state:"):
			status.State = strings.TrimSpace(strings.TrimPrefix(trimmed, "state:"))
		case len(fields) >= 5 && fields[0] == "NAME" && fields[1] == "STATE" && fields[2] == "READ":
			inTable, sawTable = true, true
		case inTable && trimmed == "":
			inTable = false
		case inTable && len(fields) >= 5:
			counters := [3]uint64{}
			for i := range counters {
				value, err := strconv.ParseUint(fields[2+i], 10, 64)
				if err != nil {
					return PoolStatus{}, fmt.Errorf("zpool status %s: vdev %s: counter %q: %w", name, fields[0], fields[2+i], ErrInvalid)
				}
				counters[i] = value
			}
			status.ReadErrors += counters[0]
			status.WriteErrors += counters[1]
			status.ChecksumErrors += counters[2]
			if fields[1] != "ONLINE" && fields[0] != name {
				status.Unhealthy = append(status.Unhealthy, fields[0]+" "+fields[1])
			}
		case strings.HasPrefix(trimmed, "errors:"):
			sawErrors = true
			text := strings.TrimSpace(strings.TrimPrefix(trimmed, "errors:"))
			if count, _, found := strings.Cut(text, " data error"); found && text != "No known data errors" {
				value, err := strconv.ParseUint(count, 10, 64)
				if err != nil {
					return PoolStatus{}, fmt.Errorf("zpool status %s: errors line %q: %w", name, trimmed, ErrInvalid)
				}
				status.DataErrors = value
			}
		}
	}
	if status.State == "" || !sawTable || !sawErrors {
		return PoolStatus{}, fmt.Errorf("zpool status %s: no state, config table or errors line in its output: %w", name, ErrInvalid)
	}
	return status, nil
}
