package subjects

import (
	"fmt"
	"strings"
)

// Session homes. A session id may name the region its state lives in:
// "<region>.<name>" (one dot; region a NATS cluster name of the
// supercluster, name an id). Such a session's subjects carry the region as
// a token of their own ("iii.events.eu.chat42"), so the region's own
// streams capture them, and its KV entries live in the region's buckets
// (RegionalBucket). A session id without a dot lives in the deployment's
// primary streams and buckets, wherever those were created (docs/REGIONS.md).

// MaxRegionLen bounds a region name (a NATS cluster name).
const MaxRegionLen = 64

// SessionIDSchema is the JSON Schema of a session id, [ValidateSessionID]'s
// rule, for function request schemas.
const SessionIDSchema = `{"type":"string","maxLength":128,"pattern":"^([A-Za-z0-9_-]{1,64}\\.)?[A-Za-z0-9_-]+$"}`

// ValidateSessionID checks a session id: an id ([ValidateID]) or
// "<region>.<name>" with a region of 1 to [MaxRegionLen] and a name of at
// least one character of [A-Za-z0-9_-], [MaxIDLen] characters in all.
func ValidateSessionID(sid string) error {
	if len(sid) > MaxIDLen {
		return fmt.Errorf("%w: session_id is longer than %d characters", ErrInvalidID, MaxIDLen)
	}
	region, name, ok := strings.Cut(sid, ".")
	if !ok {
		return ValidateID("session_id", sid)
	}
	if err := ValidateRegion(region); err != nil {
		return fmt.Errorf("%w: session_id %q: its home region: %w", ErrInvalidID, sid, err)
	}
	if name == "" || strings.Contains(name, ".") {
		return fmt.Errorf("%w: session_id %q must be <region>.<name> with one dot and a name", ErrInvalidID, sid)
	}
	if err := ValidateID("session_id", name); err != nil {
		return fmt.Errorf("%w: session_id %q: the name after the region may only contain A-Z a-z 0-9 _ -", ErrInvalidID, sid)
	}
	return nil
}

// ValidateRegion checks a region name: 1 to [MaxRegionLen] characters of
// [A-Za-z0-9_-].
func ValidateRegion(region string) error {
	if region == "" || len(region) > MaxRegionLen {
		return fmt.Errorf("%w: region %q must have 1 to %d characters", ErrInvalidID, region, MaxRegionLen)
	}
	for i := 0; i < len(region); i++ {
		if !plain(region[i]) {
			return fmt.Errorf("%w: region %q may only contain A-Z a-z 0-9 _ -", ErrInvalidID, region)
		}
	}
	return nil
}

// SessionRegion is the home region session id sid names, "" for a session
// of the primary streams (or an invalid id).
func SessionRegion(sid string) string {
	region, _, ok := strings.Cut(sid, ".")
	if !ok {
		return ""
	}
	return region
}

// RegionalStream is the name of stream base's copy homed in region
// ("III_EVENTS" → "III_EVENTS_AT_eu"); region "" is base itself.
func RegionalStream(base, region string) string {
	if region == "" {
		return base
	}
	return base + "_AT_" + region
}

// RegionalBucket is the name of KV bucket base's copy homed in region
// ("iii-turn-state" → "iii-turn-state-at-eu"); region "" is base itself.
func RegionalBucket(base, region string) string {
	if region == "" {
		return base
	}
	return base + "-at-" + region
}

// SessionStream is the stream of base that holds session sid's messages.
func SessionStream(base, sid string) string { return RegionalStream(base, SessionRegion(sid)) }

// SessionBucket is the KV bucket of base that holds session sid's keys.
func SessionBucket(base, sid string) string { return RegionalBucket(base, SessionRegion(sid)) }

// SessionSubjects is the subject filter of a per-session stream whose
// subjects are prefix + session id: "<prefix>*" for the primary stream
// (one token: ids without a region) and "<prefix><region>.*" for region's.
// The two never overlap, so both streams exist side by side.
func SessionSubjects(prefix, region string) string {
	if region == "" {
		return prefix + "*"
	}
	return prefix + region + ".*"
}

// RegionalCopy is the name of region's copy of a per-session stream, a KV
// bucket's stream ("KV_<bucket>") included: "KV_iii-turn-state" →
// "KV_iii-turn-state-at-eu", "III_EVENTS" → "III_EVENTS_AT_eu".
func RegionalCopy(stream, region string) string {
	if b, ok := strings.CutPrefix(stream, "KV_"); ok {
		return "KV_" + RegionalBucket(b, region)
	}
	return RegionalStream(stream, region)
}
