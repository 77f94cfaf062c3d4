package placement

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strings"
)

// Key layout: "<kind token>.<identity token>". A token is the string itself
// when it is short and made of [A-Za-z0-9_-] only (session ids are), "="
// followed by its unpadded base64url encoding otherwise, or "==" followed by
// the base64url SHA-256 of the string when even the encoding would be too
// long. The three forms cannot be confused: plain tokens never contain "=",
// and base64url never starts with "=".
const (
	maxPlain   = 200 // longest token kept as is
	maxEncoded = 150 // longest string base64-encoded (200 characters once encoded)
	encPrefix  = "="
	hashPrefix = "=="
)

// Key returns the ownership key of a grain in the bucket. Every kind and
// identity has one, and distinct pairs get distinct keys: a part that is not
// a safe KV token is escaped, and a very long one is replaced by its hash
// (such a key is not reversible by [ParseKey]).
func Key(kind, identity string) string {
	return token(kind) + "." + token(identity)
}

// ParseKey splits a key made by [Key] back into kind and identity. It
// returns [ErrInvalidKey] for anything [Key] cannot produce and
// [ErrKeyNotReversible] when a part was hashed.
func ParseKey(key string) (kind, identity string, err error) {
	k, id, ok := strings.Cut(key, ".")
	if !ok {
		return "", "", fmt.Errorf("%w: %q has no kind separator", ErrInvalidKey, key)
	}
	if kind, err = untoken(k); err != nil {
		return "", "", err
	}
	if identity, err = untoken(id); err != nil {
		return "", "", err
	}
	return kind, identity, nil
}

func token(s string) string {
	if s != "" && len(s) <= maxPlain && plain(s) {
		return s
	}
	if len(s) <= maxEncoded {
		return encPrefix + base64.RawURLEncoding.EncodeToString([]byte(s))
	}
	sum := sha256.Sum256([]byte(s))
	return hashPrefix + base64.RawURLEncoding.EncodeToString(sum[:])
}

func untoken(t string) (string, error) {
	switch {
	case strings.HasPrefix(t, hashPrefix):
		b, err := base64.RawURLEncoding.Strict().DecodeString(t[len(hashPrefix):])
		if err != nil || len(b) != sha256.Size {
			return "", fmt.Errorf("%w: bad hashed token %q", ErrInvalidKey, t)
		}
		return "", fmt.Errorf("%w: %q", ErrKeyNotReversible, t)
	case strings.HasPrefix(t, encPrefix):
		b, err := base64.RawURLEncoding.Strict().DecodeString(t[len(encPrefix):])
		if err != nil {
			return "", fmt.Errorf("%w: bad encoded token %q", ErrInvalidKey, t)
		}
		// Only the canonical form is valid, so that a key has one meaning.
		if s := string(b); token(s) == t {
			return s, nil
		}
		return "", fmt.Errorf("%w: non-canonical token %q", ErrInvalidKey, t)
	case t != "" && len(t) <= maxPlain && plain(t):
		return t, nil
	default:
		return "", fmt.Errorf("%w: bad token %q", ErrInvalidKey, t)
	}
}

func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
