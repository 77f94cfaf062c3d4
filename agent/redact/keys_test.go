package redact_test

import (
	"testing"

	"github.com/iii-on-nats/iii/agent/redact"
)

func TestIsSecretKey(t *testing.T) {
	t.Parallel()
	secret := []string{
		"password", "Password", "PASSWORD", "db_password", "dbPassword", "user.password", "pass word", "passwd",
		"passphrase", "passcode", "secret", "client.secret", "clientSecret", "client_secret", "aws_secret_access_key",
		"token", "access_token", "refresh-token", "X-Auth-Token", "github_token", "tokens", "max_tokens",
		"API-Key", "apiKey", "api_key", "X-Api-Key", "APIKEY", "AWS_ACCESS_KEY_ID", "private_key", "privateKey",
		"privkey", "signing_key", "encryption-key", "Authorization", "proxy-authorization",
		"auth", "Auth", "basic_auth", "basicAuth", "oauth", "proxyAuth", "auth_header", "HTTPAuth",
		"cookie", "Cookie", "Set-Cookie", "setcookie", "credential", "credentials", "Credentials",
		"signature", "X-Hub-Signature", "bearer", "jwt", "id_jwt",
		"otp", "OTP", "totp", "user_otp", "pin", "PIN", "user_pin", "pinCode", "pin2", "pwd", "db_pwd", "db_pass",
		"pass", "MYSQL_PWD", "pw", "PW", "db_pw", "DB_PW", "dbPw", "pw_hash", "passwd", "DB_PASSWD", "Pwd", "PWD_FILE",
	}
	for _, k := range secret {
		if !redact.IsSecretKey(k) {
			t.Errorf("IsSecretKey(%q) = false, want true", k)
		}
	}
	innocent := []string{
		"", "path", "key", "keys", "name", "id", "url", "description", "command", "cwd", "env", "value",
		"author", "authority", "authenticated", "authors", "spinner", "pinned", "pinned_version", "mapping",
		"shipping", "footprint", "tokenizer", "tokenizer_name", "tokenize", "Tokenization", "passenger",
		"bypass", "compass", "passing", "topic", "options", "pinecone", "keyboard",
		"primary_key", "sort_key", "public_key", "session", "session_id", "sessionId", "user", "username", "email",
		// The shell's working directory, spelled as the shell does; and
		// words that hold pw without being it.
		"PWD", "OLDPWD", "pwa", "PWA_manifest", "spwn", "cpw2",
	}
	for _, k := range innocent {
		if redact.IsSecretKey(k) {
			t.Errorf("IsSecretKey(%q) = true, want false", k)
		}
	}
}

func TestExtraKeys(t *testing.T) {
	t.Parallel()
	r, err := redact.New(redact.WithExtraKeys("X-Tenant", "ssn"))
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]bool{
		"x-tenant-id": true, "XTenant": true, "ssn": true, "user_SSN": true, "tenant": false, "path": false,
		"password": true,
	} {
		if got := r.IsSecretKey(k); got != want {
			t.Errorf("IsSecretKey(%q) = %v, want %v", k, got, want)
		}
	}
	if redact.IsSecretKey("ssn") {
		t.Error("extra keys leaked into the defaults")
	}
}
