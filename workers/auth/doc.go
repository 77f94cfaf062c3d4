// Package auth is the credentials worker: the "auth" module, which hands
// model providers the API keys and OAuth tokens they call with, and lets
// humans store, remove and inspect them without ever seeing a secret
// echoed back.
//
// # Functions
//
//   - auth::get_token {provider} → agent.Credential or null:
//     {"type":"api_key","key":…} or {"type":"oauth","access_token":…,
//     "refresh_token"?:…,"expires_at"?:<Unix ms>}. Sources, first match
//     wins: the vault, then the environment — III_<PROVIDER>_API_KEY
//     (upper case, every character outside A-Z 0-9 replaced by '_': ollama
//     → III_OLLAMA_API_KEY), then the provider's well-known variable
//     (ANTHROPIC_API_KEY for anthropic, OPENAI_API_KEY for openai). So a
//     key stored with set_token beats any exported one, and iii's own
//     variable beats the one a shell exports for other tools. An OAuth
//     credential whose expires_at has passed is still returned: the
//     provider's call fails, it reports auth_expired, and a human stores
//     fresh tokens. There is no refresh flow. Idempotent.
//   - auth::set_token {provider, credential} → {ok:true}. provider is an
//     id (1 to 128 characters of A-Z a-z 0-9 _ -); an api_key credential
//     has only a key; an oauth one an access_token, optionally a
//     refresh_token and expires_at (≥ 0). Secrets are non-empty, at most
//     [MaxKeyBytes] (keys) or [MaxTokenBytes] (tokens), valid UTF-8 with
//     no whitespace or control character. Anything else, including an
//     unknown type, is invalid_payload.
//   - auth::delete_token {provider} → {deleted: bool}. Only the vault is
//     changed; a key in the environment stays in effect.
//   - auth::status {provider?, after?} → {providers:[{provider, source:
//     "vault"|"env", type, env_var?, expires_at?, expired?,
//     has_refresh_token?, fingerprint}], truncated?}: the credential in
//     effect for one provider, or for every provider list_providers
//     covers; providers without one are left out. fingerprint is the first
//     8 hex digits of the SHA-256 of the secret ([Fingerprint]), so a human
//     can tell two keys apart without revealing either. Idempotent.
//   - auth::list_providers {after?} → {providers:[{provider, env_var,
//     configured}], truncated?}: anthropic, openai, those of the
//     "providers" setting and every provider in the vault, sorted.
//     Idempotent.
//
// The vault holds any number of providers, so both list in pages: an
// answer holds the providers, sorted, whose encoding in the request's
// codec fits the server's max payload less 1 KiB (and always at least
// one); truncated says more follow, and asking again with after set to
// the last provider answers those that sort after it. after is a provider
// id (invalid_payload otherwise). auth::status with a provider answers it
// alone and takes no after.
//
// get_token, set_token and delete_token are on agent.HumanOnly: the
// orchestrator's chokepoint never lets a model call them (reading one would
// hand the model a secret). This worker does not check who calls; the
// chokepoint does, and NATS permissions should keep iii.fn.auth.> away from
// untrusted connections.
//
// Errors: invalid_payload for bad input; internal for a vault that cannot
// be read, is too open or is corrupt (the engine logs it). No error, log
// line, span or status answer carries a secret: messages name fields and
// byte offsets, never values, and even a request that does not decode is
// described without quoting it.
//
// # The vault
//
// A JSON file, by default <home>/auth/credentials.json (setting "vault",
// or [WithVaultPath]):
//
//	{
//	  "version": 1,
//	  "credentials": {
//	    "anthropic": {"type": "api_key", "key": "sk-ant-…"},
//	    "corp": {"type": "oauth", "access_token": "…", "expires_at": 1700000000000}
//	  }
//	}
//
// As ssh does with private keys, the file must be a regular file of mode
// 0600 (or narrower) in a directory of mode 0700: the worker refuses to
// start on a vault that is more open ([ErrInsecureVault]) or that does not
// decode ([ErrCorruptVault]), and every later read checks again. A corrupt
// vault is never replaced: set_token fails until a human repairs or
// removes the file. The directory is created 0700 when missing; the file
// appears with the first set_token. Every write is atomic: a temp file in
// the same directory (mode 0600), fsync, rename over the vault, fsync of
// the directory; temp files left by a crash are removed when the vault
// opens. Writes are serialized by a mutex inside a process and by an
// exclusive flock on <vault>.lock across processes (an `iii up` node and an
// `iii worker run auth` on the same home lose no update; where flock is
// missing, run one worker per vault). A set that would make the file
// larger than [MaxVaultBytes] is refused ([ErrVaultFull],
// invalid_payload): such a file would no longer read. The environment is
// read at every call, so exporting a key needs no restart.
//
// # Lifecycle
//
//  1. New: the registry builds a [Worker]; embedders use [NewWorker].
//  2. Provision: read the settings "vault" (a relative path is relative to
//     the home) and "providers" (comma-separated); any other setting is an
//     error. Open the vault: a refused vault stops the node here.
//  3. Start: open the vault if Provision did not, register the five
//     functions.
//  4. Close: stop the endpoints. The vault stays.
//
// # Example
//
//	w := auth.NewWorker(auth.WithVaultPath(filepath.Join(home, "auth", "credentials.json")))
//	if err := w.Start(ctx, e); err != nil {
//		return err // too open, corrupt, or no path
//	}
//	defer w.Close(ctx)
//	_, err := engine.Call[auth.SetTokenResponse](ctx, e, auth.SetTokenFunction, auth.SetTokenRequest{
//		Provider: "anthropic", Credential: agent.Credential{Type: agent.CredentialAPIKey, Key: key}})
//	cred, err := engine.Call[*agent.Credential](ctx, e, auth.GetTokenFunction, auth.GetTokenRequest{Provider: "anthropic"})
//	// cred == nil: no credential anywhere
package auth
