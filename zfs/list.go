package zfs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// datasetColumns are the native properties List reads, in this order, before
// the requested user properties. Parsing depends on the order.
const (
	datasetColumns = "name,type,origin,used,referenced,available,logicalused," +
		"refquota,refreservation,volsize,volblocksize,creation,readonly,clones,defer_destroy"
	datasetColumnCount = 15
	spaceColumns       = "usedbysnapshots,compressratio"
	cryptoColumns      = "keystatus,encryptionroot"
	cryptoColumnCount  = 2
	provenanceColumns  = "guid,written,createtxg"
	provenanceCount    = 3
	spaceColumnCount   = 2
	poolColumns        = "name,health,size,allocated,free,fragmentation"
	poolColumnCount    = 6
)

// List runs `zfs list -H -p -o <columns> -t <types> -d N|-r <roots…>` and
// parses every row strictly: a row with the wrong number of columns is an
// error, never skipped (zfs stores tabs and newlines in user property values
// as given, and `-H` output cannot carry them).
//
// Depth 0 passes `-d 0` rather than no depth flag. Without one, zfs lists a
// filesystem's snapshots when -t is exactly "snapshot" (cmd/zfs/zfs_main.c,
// zfs_do_list) and refuses every root whose type is not in -t. With `-d 0` it
// lists exactly the roots of the requested types, and skips a root of another
// type if it is a filesystem (or a volume, when Types has Snapshot); other
// mismatches zfs still refuses, which comes back as ErrInvalid. Rows come
// sorted by name across all roots (snapshots after their dataset, oldest
// first), each dataset once. A user property set to "-" reads as unset: zfs
// prints both the same way.
//
// When some roots do not exist (or their pool's I/O is suspended) zfs prints
// the others and exits 1; List then returns ErrNotFound (ErrPoolSuspended),
// or, with SkipMissing (SkipSuspended), the rows of the other roots.
func (e *Exec) List(ctx context.Context, opts ListOptions) ([]Dataset, error) {
	args, err := listArgs(opts)
	if err != nil {
		return nil, err
	}
	out, err := e.zfs(ctx, args...)
	if err != nil && (opts.SkipMissing || opts.SkipSuspended) {
		err = skipRoots(err, opts)
	}
	if err != nil {
		return nil, err
	}
	return parseDatasets(out, opts)
}

// Pool runs `zpool list -H -p -o name,health,size,allocated,free,fragmentation pool`.
func (e *Exec) Pool(ctx context.Context, name string) (Pool, error) {
	if err := checkNames(name); err != nil {
		return Pool{}, err
	}
	out, err := e.run(ctx, []string{e.cfg.ZpoolPath, "list", "-H", "-p", "-o", poolColumns, name})
	if err != nil {
		return Pool{}, err
	}
	return parsePool(out)
}

// listArgs builds the zfs list arguments for opts, refusing what zfs would
// misread: no roots (that would list every pool on the host), unknown types,
// native or malformed names where user properties belong.
func listArgs(opts ListOptions) ([]string, error) {
	if len(opts.Roots) == 0 {
		return nil, fmt.Errorf("zfs: List needs at least one root: %w", ErrInvalid)
	}
	if err := checkNames(opts.Roots...); err != nil {
		return nil, err
	}
	types, err := typeList(opts.Types)
	if err != nil {
		return nil, err
	}
	columns := datasetColumns
	if opts.Space {
		columns += "," + spaceColumns
	}
	if opts.Crypto {
		columns += "," + cryptoColumns
	}
	if opts.Provenance {
		columns += "," + provenanceColumns
	}
	for _, prop := range opts.Native {
		if prop == "" || strings.ContainsAny(prop, ":,=\t\n ") {
			return nil, fmt.Errorf("zfs: %q is not a native property: %w", prop, ErrInvalid)
		}
		columns += "," + prop
	}
	for _, prop := range opts.UserProps {
		if !strings.Contains(prop, ":") || strings.ContainsAny(prop, ",=\t\n") {
			return nil, fmt.Errorf("zfs: %q is not a user property: %w", prop, ErrInvalid)
		}
		columns += "," + prop
	}
	args := []string{"list", "-H", "-p", "-o", columns, "-t", types}
	switch {
	case opts.Depth == -1:
		args = append(args, "-r")
	case opts.Depth >= 0:
		args = append(args, "-d", strconv.Itoa(opts.Depth))
	default:
		return nil, fmt.Errorf("zfs: list depth %d: %w", opts.Depth, ErrInvalid)
	}
	return append(args, opts.Roots...), nil
}

// typeList is the -t argument: the given types in order, or
// "filesystem,volume" when none are given.
func typeList(types []Type) (string, error) {
	if len(types) == 0 {
		return string(Filesystem) + "," + string(Volume), nil
	}
	names := make([]string, len(types))
	for i, t := range types {
		if t != Filesystem && t != Volume && t != Snapshot {
			return "", fmt.Errorf("zfs: dataset type %q: %w", t, ErrInvalid)
		}
		names[i] = string(t)
	}
	return strings.Join(names, ","), nil
}

// skipRoots drops what zfs list said about the roots opts lets it skip (that
// do not exist, or whose pool is suspended): nil if that was all, else the
// error classified by its other lines only (so that, say, a suspended pool
// is not reported as ErrNotFound).
func skipRoots(err error, opts ListOptions) error {
	var commandErr *CommandError
	if !errors.As(err, &commandErr) || commandErr.ExitCode != 1 {
		return err
	}
	var other []string
	for _, line := range strings.Split(strings.TrimRight(commandErr.Stderr, "\n"), "\n") {
		skip := opts.SkipMissing && isMissingDataset(line) ||
			opts.SkipSuspended && strings.HasPrefix(line, "cannot open '") && classify(line) == ErrPoolSuspended
		if !skip {
			other = append(other, line)
		}
	}
	if len(other) == 0 {
		return nil
	}
	reclassified := *commandErr
	reclassified.Kind = classify(strings.Join(other, "\n"))
	return &reclassified
}

// parseDatasets parses `zfs list -H -p` output with the datasetColumns, the
// spaceColumns when space is set, and then userProps columns.
func parseDatasets(out []byte, opts ListOptions) ([]Dataset, error) {
	text := strings.TrimSuffix(string(out), "\n")
	if text == "" {
		return nil, nil
	}
	lines := strings.Split(text, "\n")
	datasets := make([]Dataset, 0, len(lines))
	for i, line := range lines {
		dataset, err := parseDataset(strings.Split(line, "\t"), opts)
		if err != nil {
			return nil, fmt.Errorf("zfs list: row %d: %w", i+1, err)
		}
		datasets = append(datasets, dataset)
	}
	return datasets, nil
}

func parseDataset(fields []string, opts ListOptions) (Dataset, error) {
	native, columns := datasetColumnCount, datasetColumns
	if opts.Space {
		native, columns = native+spaceColumnCount, columns+","+spaceColumns
	}
	if opts.Crypto {
		native, columns = native+cryptoColumnCount, columns+","+cryptoColumns
	}
	if opts.Provenance {
		native, columns = native+provenanceCount, columns+","+provenanceColumns
	}
	extra := native
	native += len(opts.Native)
	userProps := opts.UserProps
	if want := native + len(userProps); len(fields) != want {
		return Dataset{}, fmt.Errorf("%d columns, want %d (a value with a tab or newline?)", len(fields), want)
	}
	r := rowParser{columns: columns, fields: fields}
	d := Dataset{
		Name:           fields[0],
		Type:           r.datasetType(1),
		Origin:         r.text(2),
		Used:           r.number(3),
		Referenced:     r.number(4),
		Available:      r.number(5),
		LogicalUsed:    r.number(6),
		RefQuota:       r.number(7),
		RefReservation: r.number(8),
		VolSize:        r.number(9),
		VolBlockSize:   r.number(10),
		Creation:       r.time(11),
		ReadOnly:       r.onOff(12),
		Clones:         r.list(13),
		DeferDestroy:   r.onOff(14),
		User:           userValues(userProps, fields[native:]),
	}
	if opts.Space {
		d.UsedBySnapshots = r.number(datasetColumnCount)
		d.CompressRatio = r.ratio(datasetColumnCount + 1)
	}
	if len(opts.Native) > 0 {
		d.Native = make(map[string]string, len(opts.Native))
		for i, prop := range opts.Native {
			d.Native[prop] = fields[extra+i]
		}
	}
	if opts.Crypto {
		at := extra - cryptoColumnCount
		if opts.Provenance {
			at -= provenanceCount
		}
		d.KeyStatus = r.text(at)
		d.EncryptionRoot = r.text(at + 1)
	}
	if opts.Provenance {
		d.GUID = r.number(extra - provenanceCount)
		d.Written = r.number(extra - provenanceCount + 1)
		d.CreateTxg = r.number(extra - provenanceCount + 2)
	}
	if r.err != nil {
		return Dataset{}, fmt.Errorf("dataset %s: %w", d.Name, r.err)
	}
	return d, nil
}

// userValues maps each user property to its value, leaving out the unset
// ones ("-"). It is nil when none is set.
func userValues(props, values []string) map[string]string {
	var user map[string]string
	for i, prop := range props {
		if values[i] == "-" {
			continue
		}
		if user == nil {
			user = make(map[string]string, len(props))
		}
		user[prop] = values[i]
	}
	return user
}

// parsePool parses the one row of `zpool list -H -p -o poolColumns`.
func parsePool(out []byte) (Pool, error) {
	line := strings.TrimSuffix(string(out), "\n")
	fields := strings.Split(line, "\t")
	if line == "" || strings.Contains(line, "\n") || len(fields) != poolColumnCount {
		return Pool{}, fmt.Errorf("zpool list: want one row of %d columns, got %d rows, %d columns",
			poolColumnCount, strings.Count(line, "\n")+1, len(fields))
	}
	r := rowParser{columns: poolColumns, fields: fields}
	pool := Pool{
		Name:          fields[0],
		Health:        fields[1],
		Size:          r.number(2),
		Allocated:     r.number(3),
		Free:          r.number(4),
		Fragmentation: r.percent(5),
	}
	if r.err != nil {
		return Pool{}, fmt.Errorf("zpool list: pool %s: %w", pool.Name, r.err)
	}
	return pool, nil
}

// rowParser reads typed values out of one `-H -p` row and keeps the first
// error, so that a row parses in one expression.
type rowParser struct {
	columns string // comma-separated names, for error messages
	fields  []string
	err     error
}

func (r *rowParser) fail(i int, format string, args ...any) {
	if r.err == nil {
		name := strings.Split(r.columns, ",")[i]
		r.err = fmt.Errorf("column %s: "+format, append([]any{name}, args...)...)
	}
}

// text is the field, or "" when zfs prints "-" (not applicable or unset).
func (r *rowParser) text(i int) string {
	if r.fields[i] == "-" {
		return ""
	}
	return r.fields[i]
}

// number parses an exact -p number; "-" (not applicable) and "none" are 0.
func (r *rowParser) number(i int) uint64 {
	value := r.text(i)
	if value == "" || value == "none" {
		return 0
	}
	n, err := strconv.ParseUint(value, 10, 64)
	if err != nil {
		r.fail(i, "%q is not a number", value)
	}
	return n
}

// percent is a number that zpool may print with a trailing '%'.
func (r *rowParser) percent(i int) uint64 {
	r.fields[i] = strings.TrimSuffix(r.fields[i], "%")
	return r.number(i)
}

// ratio parses a ratio such as compressratio: "1.50" (with -p) or "1.50x";
// "-" is 0.
func (r *rowParser) ratio(i int) float64 {
	value := strings.TrimSuffix(r.text(i), "x")
	if value == "" {
		return 0
	}
	n, err := strconv.ParseFloat(value, 64)
	if err != nil || n < 0 {
		r.fail(i, "%q is not a ratio", r.fields[i])
	}
	return n
}

// time parses a unix timestamp in seconds; "-" is the zero time.
func (r *rowParser) time(i int) time.Time {
	seconds := r.number(i)
	if seconds == 0 {
		return time.Time{}
	}
	return time.Unix(int64(seconds), 0).UTC()
}

// onOff parses "on"/"off"; "-" (not applicable to the type) is off.
func (r *rowParser) onOff(i int) bool {
	switch r.fields[i] {
	case "on":
		return true
	case "off", "-":
		return false
	}
	r.fail(i, "%q is neither on nor off", r.fields[i])
	return false
}

// list splits a comma-separated field; "" and "-" are empty.
func (r *rowParser) list(i int) []string {
	if value := r.text(i); value != "" {
		return strings.Split(value, ",")
	}
	return nil
}

func (r *rowParser) datasetType(i int) Type {
	switch t := Type(r.fields[i]); t {
	case Filesystem, Volume, Snapshot:
		return t
	}
	r.fail(i, "unexpected type %q", r.fields[i])
	return ""
}
