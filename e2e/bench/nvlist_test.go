package main

import (
	"errors"
	"os"
	"testing"

	"github.com/zfs-csi/zfs-csi/driver"
)

// ZFS's own answers to ZFS_IOC_OBJSET_STATS, kept by make bench in the
// guest (OpenZFS 2.3.2): a dataset and an ext4 zvol the driver made.
func TestTheOwnershipPrototypeReadsWhatZFSAnswered(t *testing.T) {
	b := &bench{props: driver.NewUserProps(driverName)}
	for _, test := range []struct {
		file    string
		volsize bool
	}{{"testdata/objset-stats-dataset.bin", false}, {"testdata/objset-stats-ext4-zvol.bin", true}} {
		packed, err := os.ReadFile(test.file)
		if err != nil {
			t.Fatal(err)
		}
		properties, err := decodeNVList(packed)
		if err != nil {
			t.Fatalf("%s: %v", test.file, err)
		}
		managed, _ := properties[b.props.Managed].(nvlist)
		if managed["value"] != "true" || managed["source"] == "" {
			t.Errorf("%s: %s is %v", test.file, b.props.Managed, managed)
		}
		volsize, _ := properties["volsize"].(nvlist)
		if _, ok := volsize["value"].(uint64); ok != test.volsize {
			t.Errorf("%s: volsize %v", test.file, properties["volsize"])
		}
		if live, err := b.liveVolume(packed); !live || err != nil {
			t.Errorf("%s: live %v, %v", test.file, live, err)
		}
		// Every cut of the answer is refused, never misread.
		for cut := 0; cut < len(packed); cut++ {
			if _, err := decodeNVList(packed[:cut]); !errors.Is(err, errNVList) {
				t.Fatalf("%s cut at %d: %v", test.file, cut, err)
			}
		}
	}
}
