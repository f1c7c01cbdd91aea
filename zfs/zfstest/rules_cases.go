package zfstest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/zfs-csi/zfs-csi/zfs"
)

// RuleCase is one rule ZFS holds a change to: a name it refuses, a size it
// refuses, a destroy or a receive it refuses, and, beside them, what it
// takes where one might expect a refusal. Run returns what the pool
// answered, for the log, and a problem when that is not what ZFS answers.
// The table (RuleCases) runs against the Fake in `go test` and against real
// ZFS through Exec in `make e2e` (e2e/tests TestRuleCasesOnZFS), as
// GuardedCases do: when they disagree, the Fake is wrong.
type RuleCase struct {
	Name string
	Run  func(ctx context.Context, p TransferPool, root string) (answer, problem string, err error)
}

// ErrUnclassified is the kind of a zfs error Exec has no sentinel for: a
// *zfs.CommandError whose Kind is nil. Cases expect it where zfs words a
// refusal in a message zfs/errors.go does not know; when that list learns
// the message, real ZFS fails the case until the Fake and the case follow.
var ErrUnclassified = errors.New("a zfs error of no kind")

// RuleCases are the rules the Fake enforces, each held to ZFS.
func RuleCases() []RuleCase {
	return slices.Concat(nameRules(), spaceRules(), destroyRules(), volsizeRules(), receiveRules(), inheritRules())
}

// RunRuleCase runs one case: its own root under parent, destroyed after.
func RunRuleCase(ctx context.Context, p TransferPool, parent string, index int, c RuleCase) (answer, problem string, err error) {
	root := fmt.Sprintf("%s/rule-%d", parent, index)
	if err := p.Create(ctx, root, zfs.CreateOptions{}); err != nil {
		return "", "", err
	}
	defer p.Destroy(context.WithoutCancel(ctx), root, zfs.DestroyOptions{Recursive: true})
	return c.Run(ctx, p, root)
}

// refusal is a change the pool must refuse with an error of kind, leaving
// everything under the case's root as it was.
type refusal struct {
	what   string
	kind   error
	change func() error
}

// refused runs each refusal in turn.
func refused(ctx context.Context, p Pool, root string, refusals ...refusal) (answer, problem string, err error) {
	var answers, problems []string
	for _, r := range refusals {
		before, err := sizes(ctx, p, root)
		if err != nil {
			return "", "", err
		}
		changeErr := r.change()
		after, err := sizes(ctx, p, root)
		if err != nil {
			return "", "", err
		}
		answers = append(answers, r.what+": "+describe(changeErr))
		if got := kindOf(changeErr); got != r.kind {
			problems = append(problems, fmt.Sprintf("%s: kind %v, want %v", r.what, got, r.kind))
		}
		if !slices.Equal(before, after) {
			problems = append(problems, fmt.Sprintf("%s changed %v into %v", r.what, before, after))
		}
	}
	return strings.Join(answers, "; "), strings.Join(problems, "; "), nil
}

// kindOf is what a caller of the pool can tell of an error: a
// CommandError's kind (ErrUnclassified when it has none), or the sentinel it
// wraps.
func kindOf(err error) error {
	if err == nil {
		return nil
	}
	var command *zfs.CommandError
	if errors.As(err, &command) {
		if command.Kind == nil {
			return ErrUnclassified
		}
		return command.Kind
	}
	for _, kind := range []error{zfs.ErrInvalid, zfs.ErrNoSpace, zfs.ErrHasDependents, zfs.ErrNotFound, zfs.ErrExists} {
		if errors.Is(err, kind) {
			return kind
		}
	}
	return err
}

// describe is an error as the log shows it: zfs's whole stderr.
func describe(err error) string {
	var command *zfs.CommandError
	switch {
	case err == nil:
		return "done"
	case errors.As(err, &command):
		return fmt.Sprintf("%q", strings.TrimSpace(command.Stderr))
	}
	return err.Error()
}

// sizes is what a refusal must leave as it was: every dataset and
// snapshot under root with its sizes.
func sizes(ctx context.Context, p Pool, root string) ([]string, error) {
	rows, err := p.List(ctx, zfs.ListOptions{Roots: []string{root}, Depth: -1,
		Types: []zfs.Type{zfs.Filesystem, zfs.Volume, zfs.Snapshot}})
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(rows))
	for _, row := range rows {
		out = append(out, fmt.Sprintf("%s volsize=%d refquota=%d refreservation=%d", row.Name, row.VolSize, row.RefQuota, row.RefReservation))
	}
	slices.Sort(out)
	return out, nil
}

// legacy keeps a filesystem the cases make unmounted.
var legacy = zfs.CreateOptions{Properties: map[string]string{"mountpoint": "legacy"}}

func creating(ctx context.Context, p Pool, name string, kind error) refusal {
	return refusal{"create " + name, kind, func() error { return p.Create(ctx, name, legacy) }}
}

func snapshotting(ctx context.Context, p Pool, name string, kind error) refusal {
	return refusal{"snapshot " + name, kind, func() error { return p.Snapshot(ctx, name, nil) }}
}

func setting(ctx context.Context, p Pool, name, property, value string, kind error) refusal {
	return refusal{fmt.Sprintf("set %s=%s on %s", property, value, name), kind, func() error {
		return p.Set(ctx, name, map[string]string{property: value})
	}}
}

// zvol makes a volume without a device node (volmode=none: udev never
// holds it open, so the case's root destroys cleanly).
func zvol(ctx context.Context, p Pool, name string, size uint64, sparse bool, properties ...string) error {
	options := zfs.CreateOptions{VolSize: size, Sparse: sparse, Properties: map[string]string{"volmode": "none"}}
	for i := 0; i+1 < len(properties); i += 2 {
		options.Properties[properties[i]] = properties[i+1]
	}
	return p.Create(ctx, name, options)
}

// ZFS_MAX_DATASET_NAME_LEN is 256 with the NUL: a name has at most 255 bytes.
func padded(prefix string, length int) string {
	return prefix + strings.Repeat("n", length-len(prefix))
}

func nameRules() []RuleCase {
	return []RuleCase{
		{"names: a character outside A-Z a-z 0-9 -_.: and space, or '#' or '%', is refused as ErrInvalid", func(ctx context.Context, p TransferPool, root string) (string, string, error) {
			return refused(ctx, p, root,
				creating(ctx, p, root+"/a*b", zfs.ErrInvalid),
				creating(ctx, p, root+"/caf\u00e9", zfs.ErrInvalid),
				creating(ctx, p, root+"/a#b", zfs.ErrInvalid),
				creating(ctx, p, root+"/a%b", zfs.ErrInvalid),
				snapshotting(ctx, p, root+"@a*b", zfs.ErrInvalid))
		}},
		{"names: 255 bytes make a filesystem or snapshot; 256 are refused as too long (ErrInvalid)", func(ctx context.Context, p TransferPool, root string) (string, string, error) {
			longest := padded(root+"/", 255)
			if err := p.Create(ctx, longest, legacy); err != nil {
				return describe(err), "a filesystem's name of 255 bytes: " + describe(err), nil
			}
			if err := p.Snapshot(ctx, padded(root+"@", 255), nil); err != nil {
				return describe(err), "a snapshot's name of 255 bytes: " + describe(err), nil
			}
			return refused(ctx, p, root,
				creating(ctx, p, padded(root+"/", 256), zfs.ErrInvalid),
				snapshotting(ctx, p, padded(root+"@", 256), zfs.ErrInvalid))
		}},
		{"names: an empty component, a trailing slash, '.' or a second '@' is refused in words Exec has no kind for", func(ctx context.Context, p TransferPool, root string) (string, string, error) {
			return refused(ctx, p, root,
				creating(ctx, p, root+"//x", ErrUnclassified),
				creating(ctx, p, root+"/x/", ErrUnclassified),
				creating(ctx, p, root+"/./x", ErrUnclassified),
				snapshotting(ctx, p, root+"@a@b", ErrUnclassified),
				snapshotting(ctx, p, root+"@", ErrUnclassified))
		}},
		{"names: '@' in the name of a new filesystem, zvol or clone is refused as ErrInvalid", func(ctx context.Context, p TransferPool, root string) (string, string, error) {
			if err := p.Create(ctx, root+"/src", legacy); err != nil {
				return "", "", err
			}
			if err := p.Snapshot(ctx, root+"/src@s", nil); err != nil {
				return "", "", err
			}
			return refused(ctx, p, root,
				creating(ctx, p, root+"/a@b", zfs.ErrInvalid),
				refusal{"create zvol " + root + "/v@b", zfs.ErrInvalid, func() error { return zvol(ctx, p, root+"/v@b", 1<<20, true) }},
				refusal{"clone to " + root + "/c@b", zfs.ErrInvalid, func() error {
					return p.Clone(ctx, root+"/src@s", root+"/c@b", map[string]string{"mountpoint": "legacy"})
				}})
		}},
	}
}

func spaceRules() []RuleCase {
	return []RuleCase{
		{"refquota: below what a filesystem references is refused as ErrInvalid (less than current used or reserved space)", func(ctx context.Context, p TransferPool, root string) (string, string, error) {
			if err := p.Create(ctx, root+"/fs", zfs.CreateOptions{}); err != nil {
				return "", "", err
			}
			if err := fill(ctx, p, root+"/fs", 1<<20); err != nil {
				return "", "", err
			}
			return refused(ctx, p, root, setting(ctx, p, root+"/fs", "refquota", "524288", zfs.ErrInvalid))
		}},
		{"refquota: below a filesystem's refreservation is refused as ErrInvalid; a refreservation above its refquota as ErrNoSpace", func(ctx context.Context, p TransferPool, root string) (string, string, error) {
			if err := p.Create(ctx, root+"/reserved", zfs.CreateOptions{Properties: map[string]string{"mountpoint": "legacy", "refreservation": "67108864"}}); err != nil {
				return "", "", err
			}
			if err := p.Create(ctx, root+"/quota", zfs.CreateOptions{Properties: map[string]string{"mountpoint": "legacy", "refquota": "33554432"}}); err != nil {
				return "", "", err
			}
			return refused(ctx, p, root,
				setting(ctx, p, root+"/reserved", "refquota", "33554432", zfs.ErrInvalid),
				setting(ctx, p, root+"/quota", "refreservation", "67108864", zfs.ErrNoSpace))
		}},
		{"refreservation: more than the pool has free is refused as ErrNoSpace, at create and at set", func(ctx context.Context, p TransferPool, root string) (string, string, error) {
			beyond, err := beyondFree(ctx, p, root)
			if err != nil {
				return "", "", err
			}
			if err := p.Create(ctx, root+"/fs", legacy); err != nil {
				return "", "", err
			}
			return refused(ctx, p, root,
				refusal{"create " + root + "/big with refreservation=" + beyond, zfs.ErrNoSpace, func() error {
					return p.Create(ctx, root+"/big", zfs.CreateOptions{Properties: map[string]string{"mountpoint": "legacy", "refreservation": beyond}})
				}},
				setting(ctx, p, root+"/fs", "refreservation", beyond, zfs.ErrNoSpace))
		}},
		{"zvol: a thick zvol larger than the pool's free space is refused as ErrNoSpace, a sparse one is made", func(ctx context.Context, p TransferPool, root string) (string, string, error) {
			beyond, err := beyondFree(ctx, p, root)
			if err != nil {
				return "", "", err
			}
			size, _ := strconv.ParseUint(beyond, 10, 64)
			answer, problem, err := refused(ctx, p, root, refusal{"create a thick zvol of " + beyond, zfs.ErrNoSpace, func() error {
				return zvol(ctx, p, root+"/thick", size, false)
			}})
			if err != nil || problem != "" {
				return answer, problem, err
			}
			if err := zvol(ctx, p, root+"/sparse", size, true); err != nil {
				return answer, "a sparse zvol larger than the pool: " + describe(err), nil
			}
			return answer + "; a sparse zvol of the same size: done", "", nil
		}},
		{"zvol: growing a thick zvol past the pool's free space is refused as ErrNoSpace, its size kept", func(ctx context.Context, p TransferPool, root string) (string, string, error) {
			beyond, err := beyondFree(ctx, p, root)
			if err != nil {
				return "", "", err
			}
			if err := zvol(ctx, p, root+"/v", 64<<20, false, "volblocksize", "32768"); err != nil {
				return "", "", err
			}
			return refused(ctx, p, root, setting(ctx, p, root+"/v", "volsize", beyond, zfs.ErrNoSpace))
		}},
	}
}

// beyondFree is a size twice what root has available, a whole number of
// MiB (so a multiple of any volblocksize): more than any pool can give it.
func beyondFree(ctx context.Context, p Pool, root string) (string, error) {
	row, err := zfs.Get(ctx, p, root, nil)
	if err != nil {
		return "", err
	}
	return strconv.FormatUint((2*row.Available+1<<20)>>20<<20, 10), nil
}

func destroyRules() []RuleCase {
	destroying := func(ctx context.Context, p Pool, name string, recursive bool) refusal {
		what := "destroy " + name
		if recursive {
			what = "destroy -r " + name
		}
		return refusal{what, zfs.ErrHasDependents, func() error {
			return p.Destroy(ctx, name, zfs.DestroyOptions{Recursive: recursive})
		}}
	}
	return []RuleCase{
		{"destroy: a filesystem with a child, without -r, is refused as ErrHasDependents", func(ctx context.Context, p TransferPool, root string) (string, string, error) {
			if err := p.Create(ctx, root+"/fs", legacy); err != nil {
				return "", "", err
			}
			if err := p.Create(ctx, root+"/fs/child", legacy); err != nil {
				return "", "", err
			}
			return refused(ctx, p, root, destroying(ctx, p, root+"/fs", false))
		}},
		{"destroy: a zvol with a snapshot, without -r, is refused as ErrHasDependents", func(ctx context.Context, p TransferPool, root string) (string, string, error) {
			if err := zvol(ctx, p, root+"/v", 1<<20, true); err != nil {
				return "", "", err
			}
			if err := p.Snapshot(ctx, root+"/v@s", nil); err != nil {
				return "", "", err
			}
			return refused(ctx, p, root, destroying(ctx, p, root+"/v", false))
		}},
		{"destroy: a filesystem whose snapshot has a clone elsewhere, even with -r, and that snapshot, are refused as ErrHasDependents", func(ctx context.Context, p TransferPool, root string) (string, string, error) {
			if err := p.Create(ctx, root+"/fs", legacy); err != nil {
				return "", "", err
			}
			if err := p.Snapshot(ctx, root+"/fs@s", nil); err != nil {
				return "", "", err
			}
			if err := p.Clone(ctx, root+"/fs@s", root+"/clone", map[string]string{"mountpoint": "legacy"}); err != nil {
				return "", "", err
			}
			return refused(ctx, p, root, destroying(ctx, p, root+"/fs", true), destroying(ctx, p, root+"/fs@s", false))
		}},
	}
}

func volsizeRules() []RuleCase {
	return []RuleCase{
		{"volsize: setting one off the zvol's volblocksize is refused as ErrInvalid, and so is a clone's; zero, in words Exec has no kind for", func(ctx context.Context, p TransferPool, root string) (string, string, error) {
			if err := zvol(ctx, p, root+"/v", 64<<20, true, "volblocksize", "32768"); err != nil {
				return "", "", err
			}
			if err := p.Snapshot(ctx, root+"/v@s", nil); err != nil {
				return "", "", err
			}
			off := strconv.Itoa(64<<20 + 16<<10)
			return refused(ctx, p, root,
				setting(ctx, p, root+"/v", "volsize", off, zfs.ErrInvalid),
				setting(ctx, p, root+"/v", "volsize", "0", ErrUnclassified),
				refusal{"clone " + root + "/v@s with volsize=" + off, zfs.ErrInvalid, func() error {
					return p.Clone(ctx, root+"/v@s", root+"/c", map[string]string{"volsize": off, "volmode": "none"})
				}})
		}},
		{"volsize: zfs create -V rounds a size off the volblocksize up to it, and reserves for the rounded size", func(ctx context.Context, p TransferPool, root string) (string, string, error) {
			var figure ThickReservation
			for _, f := range ThickReservations {
				if f.VolBlockSize == 16<<10 && f.VolSize%(1<<20) != 0 {
					figure = f
				}
			}
			if figure.VolSize == 0 {
				return "", "", errors.New("ThickReservations has no 16 KiB figure off a MiB")
			}
			asked := figure.VolSize - figure.VolBlockSize + 1
			if err := zvol(ctx, p, root+"/v", asked, false, "volblocksize", "16384"); err != nil {
				return describe(err), fmt.Sprintf("a thick zvol of %d bytes with 16 KiB blocks: %s", asked, describe(err)), nil
			}
			row, err := zfs.Get(ctx, p, root+"/v", nil)
			if err != nil {
				return "", "", err
			}
			answer := fmt.Sprintf("asked %d: volsize %d, refreservation %d", asked, row.VolSize, row.RefReservation)
			return answer, firstProblem(want("volsize", row.VolSize, figure.VolSize),
				want("refreservation", row.RefReservation, figure.RefReservation)), nil
		}},
	}
}

// inheritRules: several properties go in one Inherit, or none does.
func inheritRules() []RuleCase {
	const a, b = "zfs-csi.test:a", "zfs-csi.test:b"
	marked := func(ctx context.Context, p TransferPool, root string) (string, error) {
		x := root + "/x"
		err := p.Create(ctx, x, zfs.CreateOptions{Properties: map[string]string{"mountpoint": "legacy", a: "1", b: "2", "compression": "zle"}})
		return x, err
	}
	read := func(ctx context.Context, p TransferPool, x string) (string, error) {
		rows, err := p.List(ctx, zfs.ListOptions{Roots: []string{x}, UserProps: []string{a, b}, Native: []string{"compression"}})
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("a=%q b=%q compression=%s", rows[0].User[a], rows[0].User[b], rows[0].Native["compression"]), nil
	}
	return []RuleCase{
		{"inherit: two user properties and a native one go in one call; the native one takes its parent's value", func(ctx context.Context, p TransferPool, root string) (string, string, error) {
			x, err := marked(ctx, p, root)
			if err != nil {
				return "", "", err
			}
			if err := p.Inherit(ctx, x, a, "compression", b); err != nil {
				return describe(err), "inherit: " + describe(err), nil
			}
			got, err := read(ctx, p, x)
			parent, perr := p.List(ctx, zfs.ListOptions{Roots: []string{root}, Native: []string{"compression"}})
			if err != nil || perr != nil {
				return "", "", errors.Join(err, perr)
			}
			if wanted := fmt.Sprintf("a=\"\" b=\"\" compression=%s", parent[0].Native["compression"]); got != wanted {
				return got, "after inherit: " + got + ", want " + wanted, nil
			}
			return got, "", nil
		}},
		{"inherit: a property that cannot be inherited (refquota) among others is ErrInvalid, and none goes", func(ctx context.Context, p TransferPool, root string) (string, string, error) {
			x, err := marked(ctx, p, root)
			if err != nil {
				return "", "", err
			}
			inheritErr := p.Inherit(ctx, x, a, "refquota", b)
			got, err := read(ctx, p, x)
			if err != nil {
				return "", "", err
			}
			answer := describe(inheritErr) + "; " + got
			if kindOf(inheritErr) != zfs.ErrInvalid || got != `a="1" b="2" compression=zle` {
				return answer, "inherit with refquota: " + answer + `, want ErrInvalid and a="1" b="2" compression=zle`, nil
			}
			return answer, "", nil
		}},
	}
}
