package directory

// OverviewSkill is the skill "directory/overview" the worker publishes at
// Start: how a model uses the directory.
const OverviewSkill = `---
title: Skills directory
type: overview
description: Find how to use any function; read its skill with directory::skills::get before you first call it.
---
Every function on the bus has a skill document: what it does, when to use
it, its arguments and its errors. The skills index in your instructions
lists them, one line per skill, each with a link such as
iii://sandbox/fs::read.

- Before you first call a function, read its skill:
  directory::skills::get {"id": "iii://<worker>/<function>"}.
- To find a skill the index does not show, list them:
  directory::skills::list {"worker": "<worker>"}.
- A skill may link other skills (iii://...); read them the same way.
- not_found means there is no such skill; check the id against the list.
`

const getSkill = `---
title: Get a skill
description: Read one skill document (how and when to use a function) by its id or iii:// link.
---
Call directory::skills::get before you first use a function.

Request: {"id": "iii://sandbox/fs::read"} (a link) or {"id": "sandbox/fs::read"}
(worker, "/", function id).

Response: {id, link, worker, title, type, function_id, description, body,
source}. The body is the markdown to read; source is "published" (the
worker's own) or "folder" (the operator's, which wins).

Errors: invalid_payload for an id that is not <worker>/<function>;
not_found for an unknown skill.
`

const listSkill = `---
title: List skills
description: List skill summaries sorted by id, optionally of one worker or one type.
---
Use directory::skills::list to discover skills that the index does not
show, or all skills of one worker.

Request: {} for all; {"worker": "sandbox"}; {"type": "overview"} for the
workers' overviews. Filters are names (letters, digits, '-', '_').

Response: {"skills": [{id, link, worker, title, type, function_id,
description}], "truncated"?}, without bodies: read one with
directory::skills::get. When truncated is true, more skills follow: ask
again with "after" set to the id of the last skill received.
`

const indexSkill = `---
title: Skills index
description: The whole skills index, one overview per worker and a compact markdown list for a system prompt.
---
directory::skills::index {} answers {workers, markdown}.

- workers: [{worker, overview, skills}]: the worker's overview skill
  (iii://<worker>/overview) if it has one, otherwise a generated list; and
  the ids of its other skills.
- markdown: the whole index, one line per skill
  ("- [title](iii://id): description"), as the orchestrator puts it into
  the system prompt.

- truncated: true when the index was larger than one message: the
  overviews are left out and the markdown may be cut; list the rest with
  directory::skills::list.

It changes as workers publish skills and as the skills folder is edited.
`
