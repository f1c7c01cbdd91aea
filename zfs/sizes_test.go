package zfs

import "testing"

func TestParseSizeReadsWhatZFSAndKubernetesWrite(t *testing.T) {
	for in, want := range map[string]uint64{
		"0": 0, "512": 512, "16K": 16 << 10, "16k": 16 << 10, "16KB": 16 << 10, "16KiB": 16 << 10,
		"1Gi": 1 << 30, "3T": 3 << 40, "1E": 1 << 60, "15E": 15 << 60,
	} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "K", "B", "16i", "16iB", "-1", "1.5G", "16X", "16 K", "16E", "99999999999999999999"} {
		if got, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, got)
		}
	}
}

func TestFormatSizePrintsWhatZFSListPrints(t *testing.T) {
	for in, want := range map[uint64]string{
		0: "0", 1023: "1023", 1024: "1.0K", 1536: "1.5K", 32 << 20: "32M", 1 << 30: "1.0G", 3<<30 + 1<<29: "3.5G", 1 << 60: "1.0E",
	} {
		if got := FormatSize(in); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", in, got, want)
		}
	}
}
