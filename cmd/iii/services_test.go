package main

// wantFunctions are the functions `iii up` must serve.
var wantFunctions = []string{
	"engine::functions::list", "engine::workers::list",
	"state::get", "state::set", "state::update", "state::delete", "state::list",
	"queue::enqueue", "queue::dead_letters", "queue::redrive", "queue::stats",
	"topic::publish",
	"cron::schedule", "cron::unschedule", "cron::list",
	"http::add_route", "http::remove_route", "http::list_routes",
	"run::start", "run::abort", "turn::get_state", "harness::trigger", "agent::trigger",
	"session::inbox_push", "session::inbox_drain",
	"provider::scripted::stream", "provider::scripted::complete", "provider::scripted::models",
	"policy::check_permissions", "policy::status", "policy::reload",
	"approval::resolve", "approval::list_pending", "approval::settings::get", "approval::settings::set",
	"hooks::publish_collect",
	"auth::get_token", "auth::set_token", "auth::delete_token", "auth::status", "auth::list_providers",
	"models::list", "models::get", "models::supports", "models::reconcile",
	"provider::anthropic::stream", "provider::anthropic::complete", "provider::anthropic::models",
	"provider::openai::stream", "provider::openai::complete", "provider::openai::models",
	"budget::create", "budget::delete", "budget::list", "budget::check", "budget::reserve", "budget::settle", "budget::usage",
}
