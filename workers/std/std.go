package std

import (
	_ "github.com/iii-on-nats/iii/workers/approval"     // approval::resolve, approval::list_pending, approval settings
	_ "github.com/iii-on-nats/iii/workers/hooks"        // hooks::publish_collect
	_ "github.com/iii-on-nats/iii/workers/orchestrator" // run::start, run::abort, turn::get_state, session inbox
	_ "github.com/iii-on-nats/iii/workers/policy"       // policy::check_permissions (permission gate)
	_ "github.com/iii-on-nats/iii/workers/scripted"     // provider::scripted::stream (offline model)
)

// Default lists the modules `iii up` starts, in start order. Each module's
// package is blank-imported above so that its init registers it.
var Default = []string{"policy", "approval", "hooks", "provider-scripted", "orchestrator"}
