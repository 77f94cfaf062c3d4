package sessiontree

import (
	"fmt"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/iii-on-nats/iii/agent"
)

// Records are read by the thousand on every path read, so they encode and
// decode themselves: the reflective codec's struct walk was a fifth of the
// CPU of session::messages. The bytes are those the reflective codec
// writes with the json tags (omitempty as tagged); decoding accepts any
// key order and skips unknown keys.

var (
	_ msgpack.CustomEncoder = (*record)(nil)
	_ msgpack.CustomDecoder = (*record)(nil)
)

// EncodeMsgpack writes r as a map with the json tags' keys.
func (r *record) EncodeMsgpack(enc *msgpack.Encoder) error {
	n := 5 // v, type, timestamp, depth, n
	for _, set := range [...]bool{r.ParentID != "", r.Message != nil, r.Summary != "", r.FirstKeptEntryID != "",
		r.TokensBefore != 0, r.FromEntryID != "", r.CustomType != "", r.Data != nil, r.Run != 0, r.RunDepth != 0, r.RunParent != ""} {
		if set {
			n++
		}
	}
	w := recWriter{enc: enc}
	w.err = enc.EncodeMapLen(n)
	w.int("v", int64(r.V))
	w.optStr("parent_id", r.ParentID)
	w.str("type", string(r.Type))
	w.int("timestamp", r.Timestamp)
	if r.Message != nil {
		w.key("message")
		if w.err == nil {
			w.err = r.Message.EncodeMsgpack(enc)
		}
	}
	w.optStr("summary", r.Summary)
	w.optStr("first_kept_entry_id", r.FirstKeptEntryID)
	if r.TokensBefore != 0 {
		w.int("tokens_before", r.TokensBefore)
	}
	w.optStr("from_entry_id", r.FromEntryID)
	w.optStr("custom_type", r.CustomType)
	if r.Data != nil {
		w.key("data")
		if w.err == nil {
			w.err = enc.Encode(r.Data)
		}
	}
	w.uint("depth", r.Depth)
	w.uint("n", r.N)
	if r.Run != 0 {
		w.uint("run", r.Run)
	}
	if r.RunDepth != 0 {
		w.uint("run_depth", r.RunDepth)
	}
	w.optStr("run_parent", r.RunParent)
	return w.err
}

type recWriter struct {
	enc *msgpack.Encoder
	err error
}

func (w *recWriter) key(k string) {
	if w.err == nil {
		w.err = w.enc.EncodeString(k)
	}
}

func (w *recWriter) str(k, v string) {
	w.key(k)
	if w.err == nil {
		w.err = w.enc.EncodeString(v)
	}
}

func (w *recWriter) optStr(k, v string) {
	if v != "" {
		w.str(k, v)
	}
}

func (w *recWriter) int(k string, v int64) {
	w.key(k)
	if w.err == nil {
		w.err = w.enc.EncodeInt(v)
	}
}

func (w *recWriter) uint(k string, v uint64) {
	w.key(k)
	if w.err == nil {
		w.err = w.enc.EncodeUint(v)
	}
}

// DecodeMsgpack reads a map written by any msgpack encoder.
func (r *record) DecodeMsgpack(dec *msgpack.Decoder) error {
	*r = record{}
	n, err := agent.DecodeMapLen(dec)
	if err != nil {
		return fmt.Errorf("record: %w", err)
	}
	if n < 0 {
		return fmt.Errorf("record: nil")
	}
	var buf [32]byte
	for range n {
		kl, err := dec.DecodeBytesLen()
		if err != nil || kl < 0 || kl > len(buf) {
			if err == nil && kl > len(buf) {
				// A long key is none of ours: read it and skip its value.
				if err = dec.ReadFull(make([]byte, kl)); err == nil {
					err = dec.Skip()
				}
				if err == nil {
					continue
				}
			}
			return fmt.Errorf("record key: not a short string (%v)", err)
		}
		k := buf[:kl]
		if err := dec.ReadFull(k); err != nil {
			return fmt.Errorf("record key: %w", err)
		}
		if err := r.decodeField(dec, k); err != nil {
			return fmt.Errorf("record %s: %w", k, err)
		}
	}
	return nil
}

func (r *record) decodeField(dec *msgpack.Decoder, k []byte) (err error) {
	switch string(k) {
	case "v":
		r.V, err = dec.DecodeInt()
	case "parent_id":
		r.ParentID, err = dec.DecodeString()
	case "type":
		var s string
		if s, err = dec.DecodeString(); err == nil {
			r.Type = internType(s)
		}
	case "timestamp":
		r.Timestamp, err = dec.DecodeInt64()
	case "message":
		if isNil(dec) {
			return dec.DecodeNil()
		}
		r.Message = new(agent.Message)
		err = r.Message.DecodeMsgpack(dec)
	case "summary":
		r.Summary, err = dec.DecodeString()
	case "first_kept_entry_id":
		r.FirstKeptEntryID, err = dec.DecodeString()
	case "tokens_before":
		r.TokensBefore, err = dec.DecodeInt64()
	case "from_entry_id":
		r.FromEntryID, err = dec.DecodeString()
	case "custom_type":
		r.CustomType, err = dec.DecodeString()
	case "data":
		r.Data, err = dec.DecodeInterface()
	case "depth":
		r.Depth, err = dec.DecodeUint64()
	case "n":
		r.N, err = dec.DecodeUint64()
	case "run":
		r.Run, err = dec.DecodeUint64()
	case "run_depth":
		r.RunDepth, err = dec.DecodeUint64()
	case "run_parent":
		r.RunParent, err = dec.DecodeString()
	default:
		err = dec.Skip()
	}
	return err
}

// internType returns the constant for a known entry type, so decoding one
// allocates nothing more.
func internType(s string) EntryType {
	for _, t := range [...]EntryType{TypeMessage, TypeCompaction, TypeBranchSummary, TypeCustom} {
		if string(t) == s {
			return t
		}
	}
	return EntryType(s)
}

func isNil(dec *msgpack.Decoder) bool {
	c, err := dec.PeekCode()
	return err == nil && c == 0xc0
}
