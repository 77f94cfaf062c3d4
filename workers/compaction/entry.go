package compaction

// The session tree refuses an entry larger than its limit
// (session.max_entry_size, 256 KiB by default, less when the server's max
// payload is smaller), and a refused compaction entry would be refused
// again on every retry: the summary would never be stored. So the summary
// and its quote are cut to fit before the append.

// Bounds of the compaction entry ([WithMaxEntrySize]).
const (
	// DefaultMaxEntrySize is the entry limit the worker writes under: the
	// session tree's default (sessiontree.DefaultMaxEntrySize).
	DefaultMaxEntrySize = 256 << 10
	// MinMaxEntrySize bounds [WithMaxEntrySize] from below: room for
	// the entry's other fields and a useful summary.
	MinMaxEntrySize = 4 << 10
	// MaxMaxEntrySize bounds [WithMaxEntrySize] from above: the largest
	// max payload a NATS server takes.
	MaxMaxEntrySize = 64 << 20
)

// entryOverhead is what a compaction entry takes besides its summary,
// with room to spare: its other fields (type, first_kept_entry_id,
// tokens_before) and the session tree's bookkeeping (version, parent,
// timestamp, depth, ordinal, run), keys included, about 300 bytes
// encoded, and the session tree's own slack for them (160 bytes).
const entryOverhead = 1 << 10

// entryHeadroom is what the session tree keeps of the server's max
// payload for an entry's subject and headers: its limit is at most the
// max payload less that.
const entryHeadroom = 1 << 10

// minEntryPart is the least of the summary, and of the quote, that an
// entry keeps: below that a middle-omitted text is little but its marker.
const minEntryPart = minChunkBytes

// summaryRoom is the most bytes of summary (quote included) an entry
// holds under the limit maxEntry, on a server whose max payload is
// maxPayload.
func summaryRoom(maxEntry int, maxPayload int64) int {
	limit := int64(maxEntry)
	if maxPayload > 0 {
		limit = min(limit, maxPayload-entryHeadroom)
	}
	return int(max(limit-entryOverhead, 0))
}

// entrySummary is summary with quote as its latest-request section
// ([withLatestRequest]) in at most room bytes. The quote is cut first
// (down to [minEntryPart] bytes), then the summary; each loses its middle
// ([shorten]). When room cannot hold even that much of each, it fails
// with [ErrEntryTooSmall].
func entrySummary(summary, quote string, room int) (string, error) {
	full := withLatestRequest(summary, quote)
	if len(full) <= room {
		return full, nil
	}
	summary = withLatestRequest(summary, "") // trimmed, without its old quote
	sep := 0
	if quote != "" {
		sep = len(latestRequestSep)
	}
	minSummary, minQuote := min(len(summary), minEntryPart), min(len(quote), minEntryPart)
	if minSummary+sep+minQuote > room {
		return "", ErrEntryTooSmall
	}
	if q := room - sep - len(summary); q >= minQuote {
		return withLatestRequest(summary, shorten(quote, q)), nil
	}
	quote = shorten(quote, minQuote)
	summary = shorten(summary, room-sep-len(quote))
	return withLatestRequest(summary, quote), nil
}
