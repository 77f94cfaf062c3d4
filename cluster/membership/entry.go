package membership

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/iii-on-nats/iii/subjects"
)

// Member statuses.
const (
	// StatusUp is a member that hosts grains and takes new ones.
	StatusUp = "up"
	// StatusDraining is a member that still hosts its grains (it stays in
	// the proto.actor topology) but takes no new ones ([Provider.Drain]).
	StatusDraining = "draining"
)

// maxEntryBytes bounds an encoded entry; larger values are refused when
// decoding.
const maxEntryBytes = 64 << 10

// Entry is one member's record in the membership bucket, stored as JSON
// under [Key](cluster name, ID).
type Entry struct {
	// ID is the proto.actor member id (ActorSystem.ID).
	ID string `json:"id"`
	// Host and Port are the member's gRPC remote address.
	Host string `json:"host"`
	Port int    `json:"port"`
	// Kinds are the grain kinds the member hosts.
	Kinds []string `json:"kinds"`
	// Status is [StatusUp] or [StatusDraining].
	Status string `json:"status"`
	// Meta holds the facts given with [WithMeta].
	Meta map[string]string `json:"meta,omitempty"`
	// Started is when the member joined.
	Started time.Time `json:"started"`
}

// Key is the bucket key of member memberID of cluster clusterName:
// "<cluster name>.<member id>".
func Key(clusterName, memberID string) (string, error) {
	if err := validateClusterName(clusterName); err != nil {
		return "", err
	}
	if err := subjects.ValidateID("member id", memberID); err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalidEntry, err)
	}
	return clusterName + "." + memberID, nil
}

func validateClusterName(name string) error {
	if err := subjects.ValidateID("cluster name", name); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidClusterName, err)
	}
	return nil
}

// Address is the member's "host:port", as proto.actor writes it.
func (e Entry) Address() string {
	return fmt.Sprintf("%s:%d", e.Host, e.Port)
}

// Accepts reports whether the entry takes new grains of kind: status up
// and kind listed.
func (e Entry) Accepts(kind string) bool {
	return e.Status == StatusUp && slices.Contains(e.Kinds, kind)
}

// Validate checks the entry: a member id that is one key token, a host, a
// port in 1..65535, kinds of 1 to 256 bytes each (a member may host none),
// a known status and a start time that JSON can carry. The encoded entry
// is bounded too (64 KiB), when it is written or read.
func (e Entry) Validate() error {
	if err := subjects.ValidateID("member id", e.ID); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidEntry, err)
	}
	if e.Host == "" || len(e.Host) > 255 || strings.ContainsFunc(e.Host, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return fmt.Errorf("%w: host %q", ErrInvalidEntry, e.Host)
	}
	if e.Port < 1 || e.Port > 65535 {
		return fmt.Errorf("%w: port %d", ErrInvalidEntry, e.Port)
	}
	for _, k := range e.Kinds {
		if k == "" || len(k) > 256 {
			return fmt.Errorf("%w: kind %q", ErrInvalidEntry, k)
		}
	}
	if e.Status != StatusUp && e.Status != StatusDraining {
		return fmt.Errorf("%w: status %q", ErrInvalidEntry, e.Status)
	}
	if y := e.Started.Year(); y < 0 || y > 9999 {
		return fmt.Errorf("%w: start time %v", ErrInvalidEntry, e.Started)
	}
	return nil
}

// encode is the JSON stored in the bucket. It refuses what decodeEntry
// would: an entry over maxEntryBytes (many long kinds) would be ignored by
// every member, its own included, and the member would run unseen.
func (e Entry) encode() ([]byte, error) {
	if err := e.Validate(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidEntry, err)
	}
	if len(b) > maxEntryBytes {
		return nil, fmt.Errorf("%w: %d bytes encoded, more than %d", ErrInvalidEntry, len(b), maxEntryBytes)
	}
	return b, nil
}

// decodeEntry parses and validates a stored entry. Unknown fields are
// ignored, so that newer members can add some.
func decodeEntry(data []byte) (Entry, error) {
	if len(data) > maxEntryBytes {
		return Entry{}, fmt.Errorf("%w: %d bytes", ErrInvalidEntry, len(data))
	}
	var e Entry
	if err := json.Unmarshal(data, &e); err != nil {
		return Entry{}, fmt.Errorf("%w: %w", ErrInvalidEntry, err)
	}
	if len(e.Meta) == 0 {
		e.Meta = nil
	}
	if err := e.Validate(); err != nil {
		return Entry{}, err
	}
	// What decodes must encode: JSON escapes (HTML characters, control
	// characters, invalid UTF-8) can grow a value up to six times.
	if len(data) > maxEntryBytes/6 {
		if _, err := e.encode(); err != nil {
			return Entry{}, err
		}
	}
	return e, nil
}

// clone is a deep copy.
func (e Entry) clone() Entry {
	e.Kinds = slices.Clone(e.Kinds)
	e.Meta = maps.Clone(e.Meta)
	return e
}
