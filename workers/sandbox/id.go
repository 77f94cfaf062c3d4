package sandbox

import (
	"crypto/rand"
	"fmt"
	"strings"

	"github.com/iii-on-nats/iii/subjects"
)

// idSuffixLen is the length of the random part of a sandbox id.
const idSuffixLen = 10

// idAlphabet is the alphabet of the random part: no '_', so the last '_'
// of an id always separates the session id from it.
const idAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

// newSandboxID returns a fresh id for a sandbox of session sid:
// "<sid>_<10 random characters of a-z 0-9>" (with the dot of a regional
// session id: "eu.s1_..."; see the package doc). The session id is part of
// the id so that a sandbox id finds its record (keyed by session) with
// one read, and the random part tells incarnations apart: an id of a
// destroyed sandbox never names its successor.
func newSandboxID(sid string) string {
	var b [idSuffixLen]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	for i := range b {
		b[i] = idAlphabet[int(b[i])%len(idAlphabet)]
	}
	return sid + "_" + string(b[:])
}

// parseSandboxID returns the session id of sandbox id id, or an error
// wrapping [ErrInvalidID].
func parseSandboxID(id string) (string, error) {
	i := strings.LastIndexByte(id, '_')
	if i < 0 || len(id)-i-1 != idSuffixLen {
		return "", fmt.Errorf("%w: sandbox_id %q is not <session_id>_<%d characters>", ErrInvalidID, id, idSuffixLen)
	}
	for _, c := range []byte(id[i+1:]) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return "", fmt.Errorf("%w: sandbox_id %q is not <session_id>_<%d characters>", ErrInvalidID, id, idSuffixLen)
		}
	}
	sid := id[:i]
	if err := validateSessionID(sid); err != nil {
		return "", err
	}
	return sid, nil
}

// validateSessionID checks a session id (subjects.ValidateSessionID: 1
// to 128 characters of A-Z a-z 0-9 _ -, or "<region>.<name>" of those
// with exactly one dot).
func validateSessionID(sid string) error {
	if err := subjects.ValidateSessionID(sid); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidID, err)
	}
	return nil
}
