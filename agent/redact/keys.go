package redact

import (
	"bytes"
	"slices"
	"strings"
)

// secretMarkers name a secret anywhere inside a normalized key (lower case,
// ASCII letters and digits only): "X-Api-Key", "apiKey" and "client.secret"
// normalize to "xapikey", "apikey" and "clientsecret".
var secretMarkers = []string{
	"password", "passwd", "passphrase", "passcode",
	"secret", "token", "apikey", "accesskey",
	"privatekey", "privkey", "signingkey", "encryptionkey",
	"authorization", "cookie", "credential",
	"signature", "bearer", "jwt",
	// Azure: a storage connection string's AccountKey=, the
	// Ocp-Apim-Subscription-Key header of Azure AI services.
	"accountkey", "subscriptionkey",
}

// markersByFirst indexes secretMarkers by their first byte, so a key is
// scanned once instead of once per marker.
var markersByFirst = func() (t [256][][]byte) {
	for _, m := range secretMarkers {
		t[m[0]] = append(t[m[0]], []byte(m))
	}
	return t
}()

// secretWords are too short to match as substrings ("pin" is in "spinner"
// and "mapping", "otp" in "footprint", "pw" in "pwa"): they name a secret
// only as a whole word of the key ("pin", "user_pin", "pinCode", "OTP",
// "db_pw", "MYSQL_PWD").
var secretWords = []string{"otp", "totp", "hotp", "pin", "pwd", "pw", "pass"}

// shellDirVars are the shell's working-directory variables: spelled exactly
// so, they hold a directory, not a password, and an env dump or a
// "PWD=/src make" must keep them. Any other spelling with the word pwd
// ("pwd", the password field of many login forms, or "MYSQL_PWD") is a
// secret.
var shellDirVars = []string{"PWD", "OLDPWD"}

// countWords mark a key whose number is a count, not a secret: "max_tokens",
// "token_count", "tokenLimit". Normalized keys containing "tokens" count too.
var countWords = []string{"count", "limit", "max", "min", "num", "total", "size", "budget", "used"}

// IsSecretKey reports whether a map key names a secret, with the default
// rules (see the package documentation): the key is compared case-insensitively
// with every character but ASCII letters and digits removed.
//
// Value treats a secret key's value by its kind: a string, a list or an
// object is replaced by [Redacted]; null and booleans are kept (they carry no
// credential); a number is kept only when the key counts something (see the
// package documentation), so "max_tokens": 1024 survives and "pin": 1234 does not.
func IsSecretKey(k string) bool { return std.IsSecretKey(k) }

// IsSecretKey reports whether a map key names a secret with r's rules: the
// default ones plus the keys of [WithExtraKeys].
func (r *Redactor) IsSecretKey(k string) bool {
	var buf [64]byte
	n := normalize(buf[:0], k)
	for i, c := range n {
		for _, m := range markersByFirst[c] {
			if bytes.HasPrefix(n[i:], m) && !isTokenizer(n[i:], m) {
				return true
			}
		}
	}
	for _, m := range r.o.extraKeys {
		if bytes.Contains(n, m) {
			return true
		}
	}
	if slices.Contains(shellDirVars, k) {
		return false
	}
	secret := false
	eachWord(k, func(w string) bool {
		if hasSuffixFold(w, "auth") { // auth, basic_auth, oauth, proxyAuth; not author
			secret = true
			return false
		}
		for _, sw := range secretWords {
			if strings.EqualFold(w, sw) {
				secret = true
				return false
			}
		}
		return true
	})
	return secret
}

// isTokenizer reports whether the marker m at the start of n is "token"
// starting "tokeniz…" (tokenizer, tokenize): a tokenizer's name is not a
// secret.
func isTokenizer(n, m []byte) bool {
	return string(m) == "token" && bytes.HasPrefix(n[len(m):], iz)
}

var iz = []byte("iz")

// isCountKey reports whether a secret-looking key counts something, so a
// number under it is not a secret.
func isCountKey(k string) bool {
	var buf [64]byte
	if bytes.Contains(normalize(buf[:0], k), tokens) {
		return true
	}
	count := false
	eachWord(k, func(w string) bool {
		for _, cw := range countWords {
			if strings.EqualFold(w, cw) {
				count = true
				return false
			}
		}
		return true
	})
	return count
}

var tokens = []byte("tokens")

// normalize appends k in lower case with every byte that is not an ASCII
// letter or digit removed. Bytes of other scripts are kept as they are.
func normalize(dst []byte, k string) []byte {
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch {
		case 'A' <= c && c <= 'Z':
			dst = append(dst, c+'a'-'A')
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c >= 0x80:
			dst = append(dst, c)
		}
	}
	return dst
}

// eachWord calls f with the words of k, split at non-alphanumeric bytes, at
// lower→upper case changes ("apiKey"), before the last capital of a capital
// run followed by a lower case letter ("HTTPAuth" → HTTP, Auth) and between
// letters and digits ("pin2"). It stops when f returns false.
func eachWord(k string, f func(string) bool) {
	start := -1
	for i := 0; i <= len(k); i++ {
		var c byte
		if i < len(k) {
			c = k[i]
		}
		if !isAlnum(c) {
			if start >= 0 && !f(k[start:i]) {
				return
			}
			start = -1
			continue
		}
		if start >= 0 && wordBreak(k[i-1], c, k, i) {
			if !f(k[start:i]) {
				return
			}
			start = i
		}
		if start < 0 {
			start = i
		}
	}
}

func wordBreak(prev, c byte, k string, i int) bool {
	switch {
	case isDigit(prev) != isDigit(c):
		return true
	case isLower(prev) && isUpper(c):
		return true
	case isUpper(prev) && isUpper(c) && i+1 < len(k) && isLower(k[i+1]):
		return true
	}
	return false
}

func hasSuffixFold(s, suffix string) bool {
	return len(s) >= len(suffix) && strings.EqualFold(s[len(s)-len(suffix):], suffix)
}

func isAlnum(c byte) bool { return isLower(c) || isUpper(c) || isDigit(c) }
func isLower(c byte) bool { return 'a' <= c && c <= 'z' }
func isUpper(c byte) bool { return 'A' <= c && c <= 'Z' }
func isDigit(c byte) bool { return '0' <= c && c <= '9' }
