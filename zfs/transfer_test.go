package zfs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
)

// beginRecord is a BEGIN record as OpenZFS lays it out (little-endian):
// drr_type 0, magic, versioninfo (features << 2 | substream), guids, name.
func beginRecord(name string, features uint64) []byte {
	record := make([]byte, 312)
	binary.LittleEndian.PutUint64(record[8:], 0x2F5bacbac)
	binary.LittleEndian.PutUint64(record[16:], features<<2|1)
	binary.LittleEndian.PutUint64(record[40:], 0xfeed)
	binary.LittleEndian.PutUint64(record[48:], 0xbeef)
	copy(record[56:], name)
	return record
}

func TestSendRunsTheArgvOfEachKindOfStream(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts SendOptions
		want []string
	}{
		{"a whole stream keeps blocks as stored", SendOptions{}, []string{"send", "-L", "-e", "-c", "tank/csi/v@s2"}},
		{"a raw incremental", SendOptions{Raw: true, From: "tank/csi/v@s1"}, []string{"send", "-w", "-i", "tank/csi/v@s1", "tank/csi/v@s2"}},
		{"a resumed stream takes everything from its token", SendOptions{ResumeToken: "1-abc-def-789c"}, []string{"send", "-t", "1-abc-def-789c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := newFakeZFS(t)
			stream := append(beginRecord("tank/csi/v@s2", 0), bytes.Repeat([]byte("data\x00"), 50000)...)
			fake.set("zfs.send", "stdout", string(stream))
			var out bytes.Buffer
			var sent atomic.Uint64
			if err := NewExec(ExecConfig{}).Send(t.Context(), "tank/csi/v@s2", SendOptions{From: tc.opts.From, Raw: tc.opts.Raw,
				ResumeToken: tc.opts.ResumeToken, Sent: &sent}, &out); err != nil {
				t.Fatal(err)
			}
			if got := fake.argv("zfs.send"); !slices.Equal(got, tc.want) {
				t.Errorf("argv %q, want %q", got, tc.want)
			}
			if !bytes.Equal(out.Bytes(), stream) || sent.Load() != uint64(len(stream)) {
				t.Errorf("wrote %d bytes (counted %d), want the %d send printed", out.Len(), sent.Load(), len(stream))
			}
		})
	}
}

func TestSendShowsCheckTheStreamsBeginRecordAndSendsNothingItRefuses(t *testing.T) {
	fake := newFakeZFS(t)
	fake.set("zfs.send", "stdout", string(append(beginRecord("tank/private@keys", featureRaw|featureResuming), "secret"...)))
	var seen StreamBegin
	var out bytes.Buffer
	refusal := errors.New("not the snapshot asked for")
	err := NewExec(ExecConfig{}).Send(t.Context(), "", SendOptions{ResumeToken: "1-abc", Check: func(begin StreamBegin) error {
		seen = begin
		return refusal
	}}, &out)
	if !errors.Is(err, ErrRefusedStream) || !errors.Is(err, refusal) {
		t.Errorf("Send: %v, want the refusal", err)
	}
	if out.Len() != 0 {
		t.Errorf("%d bytes went out", out.Len())
	}
	want := StreamBegin{ToName: "tank/private@keys", ToGUID: 0xfeed, FromGUID: 0xbeef, Raw: true, Resuming: true}
	if seen != want {
		t.Errorf("Check saw %+v, want %+v", seen, want)
	}
}

func TestParseStreamBeginRefusesWhatIsNoBeginRecord(t *testing.T) {
	compound := beginRecord("tank/v@s", 0)
	binary.LittleEndian.PutUint64(compound[16:], 2) // DMU_COMPOUNDSTREAM
	for name, record := range map[string][]byte{
		"a short read":                beginRecord("tank/v@s", 0)[:100],
		"no magic":                    make([]byte, 312),
		"a compound stream (send -R)": compound,
	} {
		if _, err := ParseStreamBegin(record); !errors.Is(err, ErrStream) {
			t.Errorf("%s: %v, want ErrStream", name, err)
		}
	}
}

func TestReceiveIsResumableAndNamesTheBrokenStreamAsTheCause(t *testing.T) {
	fake := newFakeZFS(t)
	fake.set("zfs.receive", "read-stdin", "")
	stream := bytes.Repeat([]byte("stream\x00"), 40000)
	var received atomic.Uint64
	err := NewExec(ExecConfig{}).Receive(t.Context(), "tank/csi/_incoming/v", ReceiveOptions{
		Properties: map[string]string{"zfs.csi.dev:managed": "true"}, Received: &received}, bytes.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"receive", "-s", "-u", "-o", "zfs.csi.dev:managed=true", "tank/csi/_incoming/v"}
	if got := fake.argv("zfs.receive"); !slices.Equal(got, want) {
		t.Errorf("argv %q, want %q", got, want)
	}
	if got, _ := fake.recorded("zfs.receive", "stdin"); got != string(stream) || received.Load() != uint64(len(stream)) {
		t.Errorf("receive read %d bytes (counted %d), want %d", len(got), received.Load(), len(stream))
	}

	fake.fail("zfs.receive", "cannot receive new filesystem stream: checksum mismatch or incomplete stream.\nPartially received snapshot is saved.\n")
	dropped := io.MultiReader(bytes.NewReader(stream[:1000]), iotestErr{})
	err = NewExec(ExecConfig{}).Receive(t.Context(), "tank/csi/_incoming/v", ReceiveOptions{}, dropped)
	if err == nil || !strings.Contains(err.Error(), "the stream broke off: connection reset") {
		t.Errorf("a dropped stream: %v, want the broken stream named", err)
	}
	if got, _ := fake.recorded("zfs.receive", "stdin"); got != string(stream[:1000]) {
		t.Errorf("receive read %d bytes, want the 1000 that came", len(got))
	}
}

type iotestErr struct{}

func (iotestErr) Read([]byte) (int, error) { return 0, errors.New("connection reset by peer") }

func TestResumeTokenReadsTheReceivesProperty(t *testing.T) {
	for stdout, want := range map[string]string{"-\n": "", "1-e1e7b4e1d-c8-789c63\n": "1-e1e7b4e1d-c8-789c63"} {
		fake := newFakeZFS(t)
		fake.set("zfs.get", "stdout", stdout)
		token, err := NewExec(ExecConfig{}).ResumeToken(t.Context(), "tank/csi/_incoming/v")
		if err != nil || token != want {
			t.Errorf("zfs get printing %q: %q (%v), want %q", stdout, token, err, want)
		}
		if got, want := fake.argv("zfs.get"), []string{"get", "-H", "-p", "-o", "value", "receive_resume_token", "tank/csi/_incoming/v"}; !slices.Equal(got, want) {
			t.Errorf("argv %q", got)
		}
	}
}

func TestAReceiveThatRefusesTheStreamSaysWhyNotThatTheStreamBroke(t *testing.T) {
	fake := newFakeZFS(t)
	fake.fail("zfs.receive", "cannot receive incremental stream: most recent snapshot of tank/csi/_incoming/v does not\nmatch incremental source\n")
	// Larger than a pipe buffer: zfs quits before reading it, and the
	// copy into its stdin fails with EPIPE.
	stream := bytes.Repeat([]byte("stream\x00"), 1<<17)
	err := NewExec(ExecConfig{}).Receive(t.Context(), "tank/csi/_incoming/v", ReceiveOptions{}, bytes.NewReader(stream))
	if err == nil || !strings.Contains(err.Error(), "does not") || strings.Contains(err.Error(), "broke off") {
		t.Errorf("a refused stream: %v, want zfs's reason, not a broken stream", err)
	}
}
