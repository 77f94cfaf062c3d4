package std

import (
	_ "github.com/iii-on-nats/iii/workers/anthropic"    // provider::anthropic::stream, ::complete, ::models
	_ "github.com/iii-on-nats/iii/workers/approval"     // approval::resolve, approval::list_pending, approval settings
	_ "github.com/iii-on-nats/iii/workers/auth"         // auth::get_token, ::set_token, ::delete_token, ::status, ::list_providers
	_ "github.com/iii-on-nats/iii/workers/budget"       // budget::create, ::reserve, ::settle, ::usage, ...
	_ "github.com/iii-on-nats/iii/workers/compaction"   // compaction::compact (context compaction, threshold trigger)
	_ "github.com/iii-on-nats/iii/workers/directory"    // directory::skills::get, ::list, ::index
	_ "github.com/iii-on-nats/iii/workers/hooks"        // hooks::publish_collect
	_ "github.com/iii-on-nats/iii/workers/models"       // models::list, ::get, ::supports, ::reconcile
	_ "github.com/iii-on-nats/iii/workers/openai"       // provider::openai::stream (any OpenAI-compatible server)
	_ "github.com/iii-on-nats/iii/workers/orchestrator" // run::start, run::abort, turn::get_state, session inbox
	_ "github.com/iii-on-nats/iii/workers/policy"       // policy::check_permissions (permission gate)
	_ "github.com/iii-on-nats/iii/workers/sandbox"      // sandbox::*, shell::exec, fs::* (isolated workspaces)
	_ "github.com/iii-on-nats/iii/workers/scripted"     // provider::scripted::stream (offline model)
	_ "github.com/iii-on-nats/iii/workers/sessiontree"  // session::create, ::append, ::messages, ::fork, ::tree, ...
	_ "github.com/iii-on-nats/iii/workers/traces"       // engine::traces::group_by, ::tree (the trace store)
	_ "github.com/iii-on-nats/iii/workers/web"          // web::fetch (public web pages as text)
)

// Default lists the modules `iii up` starts, in start order. Each module's
// package is blank-imported above so that its init registers it.
var Default = []string{"policy", "approval", "hooks", "auth", "models", "budget", "directory", "traces", "provider-scripted", "provider-anthropic", "provider-openai", "web", "sandbox", "session", "compaction", "orchestrator"}
