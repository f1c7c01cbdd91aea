package daemon

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"sort"
	"strings"
	"sync"

	"github.com/rs/zerolog"
)

// journalSocket is where journald takes entries in its native protocol.
const journalSocket = "/run/systemd/journal/socket"

// journalWriter sends each event to journald as one entry: MESSAGE is the
// event's JSON line (what `journalctl -u zfs-csi` shows, as with plain
// stderr), PRIORITY comes from the level (so `journalctl -p warning` works),
// and every top-level field is a journal field of its own, upper-cased
// (METHOD, CODE, VOLUME_ID, …), for `journalctl METHOD=CreateVolume`.
// An event journald does not take is written to fallback instead.
type journalWriter struct {
	socket     string
	identifier string
	fallback   io.Writer

	mu   sync.Mutex
	conn net.Conn
}

// journalPriorities are syslog priorities by zerolog level.
var journalPriorities = map[zerolog.Level]string{
	zerolog.TraceLevel: "7", zerolog.DebugLevel: "7", zerolog.InfoLevel: "6", zerolog.WarnLevel: "4",
	zerolog.ErrorLevel: "3", zerolog.FatalLevel: "2", zerolog.PanicLevel: "0", zerolog.NoLevel: "5",
}

func (w *journalWriter) Write(p []byte) (int, error) { return w.WriteLevel(zerolog.NoLevel, p) }

func (w *journalWriter) WriteLevel(level zerolog.Level, p []byte) (int, error) {
	entry := journalEntry(w.identifier, journalPriorities[level], p)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.conn == nil {
		conn, err := net.Dial("unixgram", w.socket)
		if err != nil {
			return w.fallback.Write(p)
		}
		w.conn = conn
	}
	if _, err := w.conn.Write(entry); err != nil {
		// Too large for one datagram, or journald restarting: the event
		// still goes somewhere, and the next one dials again.
		w.conn.Close()
		w.conn = nil
		return w.fallback.Write(p)
	}
	return len(p), nil
}

// journalEntry encodes one event in journald's native format: KEY=value
// lines, or KEY, a little-endian length and the raw value for values that
// hold a newline.
func journalEntry(identifier, priority string, event []byte) []byte {
	var entry bytes.Buffer
	field := func(key, value string) {
		if !strings.Contains(value, "\n") {
			entry.WriteString(key + "=" + value + "\n")
			return
		}
		entry.WriteString(key + "\n")
		binary.Write(&entry, binary.LittleEndian, uint64(len(value)))
		entry.WriteString(value + "\n")
	}
	field("MESSAGE", string(bytes.TrimRight(event, "\n")))
	field("PRIORITY", priority)
	field("SYSLOG_IDENTIFIER", identifier)
	var fields map[string]json.RawMessage
	if json.Unmarshal(event, &fields) != nil {
		return entry.Bytes()
	}
	keys := make([]string, 0, len(fields))
	for key := range fields {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for _, key := range keys {
		switch key {
		case zerolog.LevelFieldName, zerolog.TimestampFieldName, zerolog.MessageFieldName:
			continue
		}
		value := string(fields[key])
		var text string
		if json.Unmarshal(fields[key], &text) == nil {
			value = text
		}
		field(journalFieldName(key), value)
	}
	return entry.Bytes()
}

// journalFieldName upper-cases a key into journald's field alphabet
// (A-Z, 0-9, _; not starting with '_', which marks trusted fields, or a digit).
func journalFieldName(key string) string {
	name := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		case r >= 'A' && r <= 'Z' || r >= '0' && r <= '9':
			return r
		}
		return '_'
	}, key)
	if name == "" || name[0] == '_' || name[0] >= '0' && name[0] <= '9' {
		name = "F" + name
	}
	return name
}
