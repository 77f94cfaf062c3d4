// Package models is the model catalog: the "models" module, which answers
// what each model can do (context window, max output, tools, vision,
// thinking, prompt cache) and what it costs (USD per million tokens), for
// the orchestrator's provisioning and the budget's pricing.
//
// # Functions
//
//   - models::list {provider?, capability?, after?} → {models: [Model, ...],
//     truncated?}, sorted by provider then id; never null. capability is
//     "tools", "vision", "thinking" or "cache". A list larger than the
//     server's max payload comes in pages: truncated is set, and the next
//     page is asked with after = "<provider>/<id>" of the last model
//     ([ListCursor]).
//   - models::get {provider, model_id} → Model or null. A dated id and its
//     undated alias both resolve ("claude-sonnet-4-5-20250929" and
//     "claude-sonnet-4-5"); the answer carries the canonical id.
//   - models::supports {provider, model_id, capability} → {supported}. An
//     unknown model supports nothing; an unknown capability is
//     invalid_payload.
//   - models::reconcile {provider} → {provider, known, added, missing,
//     skipped?, dropped?, known_omitted?, added_omitted?,
//     missing_omitted?}: calls provider::<provider>::models {} (which
//     answers {models:[{id, display_name?, created_at?}]}) and brings the
//     bucket in line (see [Store.Reconcile]). A provider that does not
//     answer is unavailable. The answer never outgrows the server's max
//     payload: lists too long for it are cut, added first, then missing,
//     then known (sorted prefixes), each *_omitted counting the ids its
//     list left out. missing repeats, on every run, every model still
//     marked unavailable; a reconciled model (one the catalog lacks)
//     missing for longer than the retention ([WithMissingRetention], 30
//     days) has its record deleted instead and is counted in dropped, so
//     neither the bucket nor the answer keeps every model a provider ever
//     listed. Marks of catalog models stay (the catalog bounds them).
//
// A Model is agent.Model (SPEC §4) plus "aliases", "available" (false once
// a reconcile found the provider no longer lists it) and "reconciled"
// (listed by the provider, unknown to the catalog). Requests validate:
// provider an id ([A-Za-z0-9_-]{1,128}), model ids 1 to 256 bytes without
// whitespace or control characters ([ValidateModelID]); every refusal is
// invalid_payload.
//
// # Catalog
//
// The base catalog is catalog.json, compiled in ([Embedded]): the current
// Anthropic and OpenAI models with their prices, and the scripted
// provider's offline "echo" (tools, thinking, price 0). Its format:
//
//	{"comment": "...", "models": [
//	  {"provider": "anthropic", "id": "claude-haiku-4-5-20251001", "aliases": ["claude-haiku-4-5"],
//	   "display_name": "Claude Haiku 4.5", "context_window": 200000, "max_output_tokens": 64000,
//	   "supports_tools": true, "supports_vision": true, "supports_thinking": true, "supports_cache": true,
//	   "pricing": {"input_per_1m": 1, "output_per_1m": 5, "cache_read_per_1m": 0.1, "cache_write_per_1m": 1.25}}
//	]}
//
// Prices are USD per million tokens, from 0 to [MaxPricePer1M], so a cost
// is finite for any token count; a file entry outside that fails, a bucket
// record outside it is ignored (logged).
//
// Operators correct it without a rebuild through the module's "file"
// setting: a file in the same format, relative to the node's home, whose
// entries override (field by field) or add to the base catalog
// ([ApplyOverrides]). A bad file fails Provision. Embedders and tests
// replace the base catalog with [WithCatalog].
//
// # KV layout
//
// subjects.ModelsBucket ("iii-models", [BucketConfig]: History 1, file
// storage), key "<provider>.<subjects.KVKey(model id)>", value a [Record]
// as JSON:
//
//	{"id": "claude-opus-4-6", "provider": "anthropic", ..., "available": false, "missing_since": 1767225600000}
//	{"id": "gpt-7-preview", "provider": "openai", "display_name": "GPT-7 Preview", ..., "available": true, "reconciled": true}
//
// missing_since (Unix ms) is when a reconcile first found the model
// missing; a reconciled record past the retention is deleted by the next
// reconcile (with the revision it read: a record another replica
// rewrote meanwhile stays). The delete marker left under the key (the
// stream keeps one message per key) is purged by a reconcile of the
// provider an hour later, as is any deleted key's marker of that
// provider. Only models::reconcile writes the bucket. Every replica
// follows the bucket with a KV watch (engine.FollowBucket: a bucket deleted and created again, by
// `nats kv rm`/`add` or a restore, is followed again within
// engine.DefaultBucketCheck, its records replacing those served; while it
// is gone they stay) and serves list, get and supports from memory: the base
// catalog, each entry's availability from its record, plus the reconciled
// records. A record under the id of a model the catalog describes only
// contributes its availability; one under an alias of it (reconciled
// before the catalog knew that name) and a non-reconciled record of a
// model the catalog no longer has are ignored.
//
// # Lifecycle
//
//  1. New: the registry builds a [Worker]; embedders use [NewWorker].
//  2. Provision: the "file" setting adds [WithCatalogFile]; the options
//     are applied and the catalog built once, so errors surface here.
//  3. Start: [Open] the store (bucket created when missing, records
//     loaded before the functions are registered) and register the four
//     functions.
//  4. Close: stop the endpoints, then the bucket watch.
//
// # Example
//
//	w := models.NewWorker()
//	if err := w.Start(ctx, e); err != nil {
//		return err
//	}
//	defer w.Close(ctx)
//	m, err := engine.Call[*models.Model](ctx, e, models.GetFunction,
//		models.GetRequest{Provider: "anthropic", ModelID: "claude-sonnet-4-5"})
//	if err == nil && m != nil {
//		cost := m.Pricing.Cost(usage)
//	}
package models
