package zfs

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/rs/zerolog"
)

var inspectProps = []string{"zfs.csi.dev:managed", "zfs.csi.dev:deleted", "zfs.csi.dev:fstype", "zfs.csi.dev:source"}

// statsOf is the stats struct the kernel answers beside props: the type,
// createtxg and guid both carry, agreeing.
func statsOf(props nvList, snapshot bool, origin string) objsetStats {
	typ, _ := propValue(props, "type").(uint64)
	txg, _ := propValue(props, "createtxg").(uint64)
	guid, _ := propValue(props, "guid").(uint64)
	return objsetStats{objsetType: uint32(typ), creationTxg: txg, guid: guid, snapshot: snapshot, origin: origin}
}

func TestInspectReadsTheRecordedAnswersAsZFSListedThem(t *testing.T) {
	for _, recorded := range recordedObjsetStats {
		_, props := decodeRecorded(t, recorded.file)
		stats := objsetStats{objsetType: uint32(recorded.typ), creationTxg: recorded.txg, guid: recorded.guid}
		row, err := objsetDataset(recorded.name, stats, props, inspectProps)
		if err != nil {
			t.Fatalf("%s: %v", recorded.file, err)
		}
		want := Dataset{Name: recorded.name, Type: Filesystem, User: map[string]string{"zfs.csi.dev:managed": "true"}}
		if recorded.volsize {
			want.Type, want.User["zfs.csi.dev:fstype"] = Volume, "ext4"
		}
		if !reflect.DeepEqual(row, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", recorded.file, row, want)
		}
		// The same answer with a struct read at the wrong place is refused.
		stats.guid++
		if _, err := objsetDataset(recorded.name, stats, props, inspectProps); !errors.Is(err, errObjsetSurprise) {
			t.Errorf("%s with another guid in the struct: %v", recorded.file, err)
		}
	}
}

// answer builds the property list of a dataset by the kernel's rules: type,
// createtxg and guid always; then the given properties. It is decoded as
// Exec.Inspect decodes it, for the properties objsetDataset reads.
func answer(objsetType uint64, build func(*nvBuilder)) nvList {
	b := newNVBuilder().property("type", objsetType).property("createtxg", uint64(77)).
		property("guid", uint64(0xfeed)).property("compression", uint64(15), "tank")
	build(b)
	props, err := decodeNVListOf(b.bytes(), inspectedProps(inspectProps))
	if err != nil {
		panic(err)
	}
	return props
}

func TestInspectReadsEachKindOfDatasetAsZFSListPrintsIt(t *testing.T) {
	for _, test := range []struct {
		what     string
		name     string
		props    nvList
		snapshot bool
		origin   string
		want     Dataset
	}{
		{"a filesystem with a local and an inherited user property, and one set to '-'", "tank/csi/a",
			answer(objsetTypeZFS, func(b *nvBuilder) {
				b.property("zfs.csi.dev:managed", "true", "tank/csi/a").property("zfs.csi.dev:deleted", "-", "tank/csi/a").
					property("zfs.csi.dev:fstype", "from-parent", "tank/csi").property("other:prop", "unasked", "tank/csi/a")
			}), false, "",
			Dataset{Name: "tank/csi/a", Type: Filesystem, User: map[string]string{"zfs.csi.dev:managed": "true", "zfs.csi.dev:fstype": "from-parent"}}},
		{"a zvol cloned from a snapshot (origin in the struct and the properties)", "tank/csi/b",
			answer(objsetTypeZvol, func(b *nvBuilder) {
				b.property("origin", "tank/csi/a@s").property("volsize", uint64(1<<30)).property("zfs.csi.dev:source", "node:tank/csi/a@s", "tank/csi/b")
			}), false, "tank/csi/a@s",
			Dataset{Name: "tank/csi/b", Type: Volume, Origin: "tank/csi/a@s", User: map[string]string{"zfs.csi.dev:source": "node:tank/csi/a@s"}}},
		{"a snapshot, whose user properties its dataset's are", "tank/csi/a@s",
			answer(objsetTypeZFS, func(b *nvBuilder) { b.property("zfs.csi.dev:managed", "true", "tank/csi/a") }), true, "",
			Dataset{Name: "tank/csi/a@s", Type: Snapshot, User: map[string]string{"zfs.csi.dev:managed": "true"}}},
		{"an encrypted dataset with its key loaded", "tank/csi/e",
			answer(objsetTypeZFS, func(b *nvBuilder) {
				b.property("keystatus", uint64(2)).property("encryption", uint64(8)).property("encryptionroot", "tank/csi/e")
			}), false, "",
			Dataset{Name: "tank/csi/e", Type: Filesystem, KeyStatus: "available", EncryptionRoot: "tank/csi/e"}},
		{"a clone of an encrypted volume, its key not loaded", "tank/csi/f",
			answer(objsetTypeZvol, func(b *nvBuilder) {
				b.property("keystatus", uint64(1)).property("encryptionroot", "tank/csi/e").property("origin", "tank/csi/e@s")
			}), false, "tank/csi/e@s",
			Dataset{Name: "tank/csi/f", Type: Volume, Origin: "tank/csi/e@s", KeyStatus: "unavailable", EncryptionRoot: "tank/csi/e"}},
		{"an origin in the properties only (libzfs 2.1 and 2.3 print it when dds_origin is empty)", "tank/csi/h",
			answer(objsetTypeZFS, func(b *nvBuilder) { b.property("origin", "tank/csi/a@s") }), false, "",
			Dataset{Name: "tank/csi/h", Type: Filesystem, Origin: "tank/csi/a@s"}},
		{"an empty user property value", "tank/csi/g",
			answer(objsetTypeZFS, func(b *nvBuilder) { b.property("zfs.csi.dev:fstype", "", "tank/csi/g") }), false, "",
			Dataset{Name: "tank/csi/g", Type: Filesystem, User: map[string]string{"zfs.csi.dev:fstype": ""}}},
	} {
		row, err := objsetDataset(test.name, statsOf(test.props, test.snapshot, test.origin), test.props, inspectProps)
		if err != nil || !reflect.DeepEqual(row, test.want) {
			t.Errorf("%s:\n got %+v, %v\nwant %+v", test.what, row, err, test.want)
		}
	}
}

func TestInspectRefusesAnAnswerItCannotReadForCertain(t *testing.T) {
	plain := answer(objsetTypeZFS, func(*nvBuilder) {})
	for _, test := range []struct {
		what  string
		name  string
		props nvList
		stats func(*objsetStats)
	}{
		// ZFS's ordinary answers that Inspect leaves to zfs list: not misfits.
		{"a receive in progress", "tank/a", plain, func(s *objsetStats) { s.inconsistent = true }},
		{"a tab in a value zfs list would print", "tank/a", answer(objsetTypeZFS, func(b *nvBuilder) { b.property(inspectProps[1], "a\tb", "tank/a") }), func(*objsetStats) {}},
		{"a newline in a value zfs list would print", "tank/a", answer(objsetTypeZFS, func(b *nvBuilder) { b.property(inspectProps[2], "a\nb", "tank") }), func(*objsetStats) {}},
	} {
		stats := statsOf(plain, false, "")
		test.stats(&stats)
		if row, err := objsetDataset(test.name, stats, test.props, inspectProps); !errors.Is(err, errObjsetSurprise) || errors.Is(err, errObjsetMisfit) {
			t.Errorf("%s: %+v, %v", test.what, row, err)
		}
	}
	// Answers in a form this code was not written for: misfits.
	for _, test := range []struct {
		what  string
		name  string
		props nvList
		stats func(*objsetStats)
	}{
		{"another createtxg in the struct", "tank/a", plain, func(s *objsetStats) { s.creationTxg++ }},
		{"another type in the struct", "tank/a", plain, func(s *objsetStats) { s.objsetType = objsetTypeZvol }},
		{"no type property", "tank/a", nvList{}, func(*objsetStats) {}},
		{"a snapshot flag on a dataset's name", "tank/a", plain, func(s *objsetStats) { s.snapshot = true }},
		{"a snapshot's name without the flag", "tank/a@s", plain, func(*objsetStats) {}},
		{"an objset type that is no dataset", "tank/a", answer(4, func(*nvBuilder) {}), func(*objsetStats) {}},
		{"a snapshot with an origin", "tank/a@s", plain, func(s *objsetStats) { s.snapshot, s.origin = true, "tank/b@s" }},
		{"two origins", "tank/a", answer(objsetTypeZFS, func(b *nvBuilder) { b.property("origin", "tank/b@s") }),
			func(s *objsetStats) { s.origin = "tank/c@s" }},
		{"an origin in the struct only (2.3 would print it, 2.1 not)", "tank/a", plain, func(s *objsetStats) { s.origin = "tank/c@s" }},
		{"a numeric origin", "tank/a", answer(objsetTypeZFS, func(b *nvBuilder) { b.property("origin", uint64(1)) }), func(*objsetStats) {}},
		{"keystatus none", "tank/a", answer(objsetTypeZFS, func(b *nvBuilder) { b.property("keystatus", uint64(0)) }), func(*objsetStats) {}},
		{"keystatus 3", "tank/a", answer(objsetTypeZFS, func(b *nvBuilder) { b.property("keystatus", uint64(3)) }), func(*objsetStats) {}},
		{"keystatus as text", "tank/a", answer(objsetTypeZFS, func(b *nvBuilder) { b.property("keystatus", "available") }), func(*objsetStats) {}},
		{"an empty encryptionroot", "tank/a", answer(objsetTypeZFS, func(b *nvBuilder) { b.property("encryptionroot", "") }), func(*objsetStats) {}},
		{"a numeric encryptionroot", "tank/a", answer(objsetTypeZFS, func(b *nvBuilder) { b.property("encryptionroot", uint64(5)) }), func(*objsetStats) {}},
		{"a numeric user property", "tank/a", answer(objsetTypeZFS, func(b *nvBuilder) { b.property(inspectProps[0], uint64(1), "tank/a") }), func(*objsetStats) {}},
		{"a user property without a value", "tank/a", answer(objsetTypeZFS, func(b *nvBuilder) { b.list(inspectProps[0]).string("source", "tank/a").end() }), func(*objsetStats) {}},
		{"a user property that is no list", "tank/a", answer(objsetTypeZFS, func(b *nvBuilder) { b.string(inspectProps[0], "true") }), func(*objsetStats) {}},
	} {
		stats := statsOf(plain, false, "")
		test.stats(&stats)
		if row, err := objsetDataset(test.name, stats, test.props, inspectProps); !errors.Is(err, errObjsetMisfit) || !errors.Is(err, errObjsetSurprise) {
			t.Errorf("%s: %+v, %v", test.what, row, err)
		}
	}
}

func TestInspectGoesToZFSListForNamesZFSTreatsApart(t *testing.T) {
	long := "tank/" + strings.Repeat("x", maxDatasetName)
	for name, want := range map[string]bool{
		"tank/csi/pvc-1": true, "tank/csi/pvc 1:x.y_z-w": true, "tank/csi/a@snap-1": true, "Tank2/a": true,
		"tank/a#bookmark": false, "tank/a@": false, "tank/a@b@c": false, "tank//a": false, "tank/a/": false, "/tank/a": false,
		"tank/./a": false, "tank/../a": false, "tank/a%recv": false, "1tank/a": false, "mirror/a": false, "raidz": false,
		"tank/ä": false, long: false, "": false, "tank/a\n": false,
	} {
		if got := inspectable(name, inspectProps); got != want {
			t.Errorf("inspectable(%q) = %v, want %v", name, got, want)
		}
	}
	for _, prop := range []string{"no-colon", "Upper:case", "zfs.csi.dev:a b", "zfs.csi.dev:a,b", "a:b=c", "a:b+c"} {
		if inspectable("tank/a", []string{prop}) {
			t.Errorf("the user property %q is read by the ioctl, not zfs list", prop)
		}
	}
}

// inspectExec is an Exec over the fake zfs binary whose ioctl answers with
// answer (called once per Inspect; calls counts them).
func inspectExec(t *testing.T, answer func(name string) (objsetStats, []byte, error)) (*Exec, *fakeZFS, *int) {
	fake := newFakeZFS(t)
	e := NewExec(ExecConfig{})
	calls := 0
	e.objsetStats = func(ctx context.Context, name string) (objsetStats, []byte, error) {
		calls++
		return answer(name)
	}
	return e, fake, &calls
}

// listedClone is what the fake zfs list prints for tank/csi/pvc-c (recorded
// from OpenZFS 2.3.2, testdata/list-clone.txt, with keystatus and
// encryptionroot), and listedCloneRow the fields Inspect keeps of it.
const listedClone = "tank/csi/pvc-c\tfilesystem\ttank/csi/pvc-a@snap-1\t0\t24576\t6708372992\t0\t0\t0\t-\t-\t1795317114\toff\t-\t-\t-\t-\ttrue\t-\t-\t-\n"

var listedCloneRow = Dataset{Name: "tank/csi/pvc-c", Type: Filesystem, Origin: "tank/csi/pvc-a@snap-1", User: map[string]string{"zfs.csi.dev:managed": "true"}}

func TestInspectAnswersFromTheIoctlWithoutACommand(t *testing.T) {
	props := newNVBuilder().property("type", uint64(objsetTypeZFS)).property("createtxg", uint64(9)).property("guid", uint64(3)).
		property("origin", "tank/csi/pvc-a@snap-1").property("zfs.csi.dev:managed", "true", "tank/csi/pvc-c").bytes()
	e, fake, calls := inspectExec(t, func(string) (objsetStats, []byte, error) {
		return objsetStats{objsetType: objsetTypeZFS, creationTxg: 9, guid: 3, origin: "tank/csi/pvc-a@snap-1"}, props, nil
	})
	row, err := Inspect(t.Context(), e, "tank/csi/pvc-c", inspectProps)
	if err != nil || !reflect.DeepEqual(row, listedCloneRow) {
		t.Errorf("Inspect = %+v, %v; want %+v", row, err, listedCloneRow)
	}
	if _, ran := fake.recorded("zfs.list", "argv"); ran || *calls != 1 {
		t.Errorf("zfs list ran: %v, ioctls %d", ran, *calls)
	}
}

func TestInspectFallsBackToZFSListWhenTheIoctlCannotAnswer(t *testing.T) {
	good := newNVBuilder().property("type", uint64(objsetTypeZFS)).property("createtxg", uint64(9)).property("guid", uint64(3)).bytes()
	for what, answer := range map[string]func(string) (objsetStats, []byte, error){
		"an answer that does not decode": func(string) (objsetStats, []byte, error) {
			return objsetStats{objsetType: objsetTypeZFS, creationTxg: 9, guid: 3}, good[:len(good)-1], nil
		},
		"a struct that disagrees with the properties": func(string) (objsetStats, []byte, error) {
			return objsetStats{objsetType: objsetTypeZFS, creationTxg: 10, guid: 3}, good, nil
		},
		"no /dev/zfs": func(string) (objsetStats, []byte, error) {
			return objsetStats{}, nil, fmt.Errorf("ZFS_IOC_OBJSET_STATS: %w", syscall.ENOENT)
		},
		"EAGAIN (a suspended pool)": func(string) (objsetStats, []byte, error) {
			return objsetStats{}, nil, fmt.Errorf("ZFS_IOC_OBJSET_STATS tank/csi/pvc-c: %w", syscall.EAGAIN)
		},
	} {
		e, fake, calls := inspectExec(t, answer)
		fake.set("zfs.list", "stdout", listedClone)
		row, err := e.Inspect(t.Context(), "tank/csi/pvc-c", inspectProps)
		if err != nil || !reflect.DeepEqual(row, listedCloneRow) || *calls != 1 {
			t.Errorf("%s: Inspect = %+v, %v after %d ioctls; want %+v from zfs list", what, row, err, *calls, listedCloneRow)
		}
		want := []string{"list", "-H", "-p", "-o", datasetColumns + "," + cryptoColumns + "," + strings.Join(inspectProps, ","),
			"-t", "filesystem,volume,snapshot", "-d", "0", "tank/csi/pvc-c"}
		if argv := fake.argv("zfs.list"); !reflect.DeepEqual(argv, want) {
			t.Errorf("%s: zfs list argv %q", what, argv)
		}
	}
}

func TestInspectTakesZFSListsWordOnEverythingButENOENT(t *testing.T) {
	// The fallback's own error is the answer: here the pool's I/O is suspended.
	e, fake, _ := inspectExec(t, func(name string) (objsetStats, []byte, error) {
		return objsetStats{}, nil, fmt.Errorf("ZFS_IOC_OBJSET_STATS %s: %w", name, syscall.EAGAIN)
	})
	fake.fail("zfs.list", "cannot open 'tank/csi/pvc-c': pool I/O is currently suspended\n")
	if _, err := e.Inspect(t.Context(), "tank/csi/pvc-c", inspectProps); !errors.Is(err, ErrPoolSuspended) {
		t.Errorf("Inspect on a suspended pool: %v", err)
	}
	// ENOENT is the ioctl's own answer, as zfs list gives it: no command.
	e, fake, calls := inspectExec(t, func(name string) (objsetStats, []byte, error) {
		return objsetStats{}, nil, fmt.Errorf("ZFS_IOC_OBJSET_STATS %s: %w", name, ErrNotFound)
	})
	if _, err := e.Inspect(t.Context(), "tank/csi/gone", inspectProps); !errors.Is(err, ErrNotFound) || *calls != 1 {
		t.Errorf("Inspect of a missing dataset: %v after %d ioctls", err, *calls)
	}
	if _, ran := fake.recorded("zfs.list", "argv"); ran {
		t.Error("zfs list ran for a dataset the ioctl said does not exist")
	}
	// A name zfs treats apart never reaches the ioctl; zfs list refuses it.
	fake.fail("zfs.list", "cannot open 'tank/a#b': invalid character '#' in name\n")
	if _, err := e.Inspect(t.Context(), "tank/a#b", inspectProps); err == nil || *calls != 1 {
		t.Errorf("Inspect of a bookmark's name: %v after %d ioctls", err, *calls)
	}
	// A caller that gave up gets its context's error, not a fallback.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	e, fake, _ = inspectExec(t, func(name string) (objsetStats, []byte, error) {
		return objsetStats{}, nil, fmt.Errorf("ZFS_IOC_OBJSET_STATS %s: %w", name, ctx.Err())
	})
	if _, err := e.Inspect(ctx, "tank/csi/pvc-c", inspectProps); !errors.Is(err, context.Canceled) {
		t.Errorf("Inspect after the context ended: %v", err)
	}
	if _, ran := fake.recorded("zfs.list", "argv"); ran {
		t.Error("zfs list ran after the context ended")
	}
}

// inspectOnly is an Interface without Inspect: Inspect lists.
type inspectOnly struct{ Interface }

func TestInspectOfAnInterfaceWithoutItListsAndKeepsTheSameFields(t *testing.T) {
	fake := newFakeZFS(t)
	fake.set("zfs.list", "stdout", listedClone)
	row, err := Inspect(t.Context(), inspectOnly{NewExec(ExecConfig{})}, "tank/csi/pvc-c", inspectProps)
	if err != nil || !reflect.DeepEqual(row, listedCloneRow) {
		t.Errorf("Inspect = %+v, %v; want %+v", row, err, listedCloneRow)
	}
}

func TestInspectWarnsOfTheFirstAnswerItDoesNotKnowOnly(t *testing.T) {
	props := newNVBuilder().property("type", uint64(objsetTypeZFS)).property("createtxg", uint64(9)).property("guid", uint64(3)).bytes()
	eagain := func() (objsetStats, []byte, error) { return objsetStats{}, nil, syscall.EAGAIN }
	undecodable := func() (objsetStats, []byte, error) { return objsetStats{objsetType: objsetTypeZFS}, props[:20], nil }
	disagreeing := func() (objsetStats, []byte, error) {
		return objsetStats{objsetType: objsetTypeZFS, guid: 4}, props, nil
	}
	for _, test := range []struct {
		answers []func() (objsetStats, []byte, error)
		want    []string
	}{
		{[]func() (objsetStats, []byte, error){eagain, undecodable, undecodable, eagain}, []string{"debug", "warn", "debug", "debug"}},
		{[]func() (objsetStats, []byte, error){eagain, disagreeing, undecodable}, []string{"debug", "warn", "debug"}},
	} {
		fake := newFakeZFS(t)
		fake.set("zfs.list", "stdout", listedClone)
		var log strings.Builder
		e := NewExec(ExecConfig{Logger: zerolog.New(&log).Level(zerolog.DebugLevel)})
		answers := test.answers
		e.objsetStats = func(ctx context.Context, name string) (objsetStats, []byte, error) {
			if err := ctx.Err(); err != nil {
				return objsetStats{}, nil, err
			}
			answer := answers[0]
			answers = answers[1:]
			return answer()
		}
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if _, err := e.Inspect(ctx, "tank/csi/pvc-c", inspectProps); !errors.Is(err, context.Canceled) {
			t.Fatalf("Inspect after the context ended: %v", err)
		}
		for range test.answers {
			if _, err := e.Inspect(t.Context(), "tank/csi/pvc-c", inspectProps); err != nil {
				t.Fatal(err)
			}
		}
		var levels []string
		for _, line := range strings.Split(log.String(), "\n") {
			if strings.Contains(line, "instead of ZFS_IOC_OBJSET_STATS") {
				levels = append(levels, strings.Split(strings.SplitAfter(line, `"level":"`)[1], `"`)[0])
				if !strings.Contains(line, `"reason":"`) {
					t.Errorf("the line does not say why: %s", line)
				}
			}
		}
		if !reflect.DeepEqual(levels, test.want) {
			t.Errorf("fallback lines at levels %v, want %v (a warning for the first misfit only, none for the call whose context ended)\n%s", levels, test.want, log.String())
		}
	}
}
