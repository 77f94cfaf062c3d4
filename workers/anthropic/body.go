package anthropic

// maxErrorResponse bounds what is read of a response with an error status.
// The SDK reads such a body whole to build its error: a broken or hostile
// gateway answering with an endless body would otherwise make the process
// allocate all of it. The API's error bodies are a few hundred bytes. Past
// it the body reads as ended (a cut JSON error is kept as raw text and
// classified by its status), and closing it drops the connection rather
// than draining the rest.
const maxErrorResponse = 64 << 10

// MaxModelsResponse bounds the body of one page of GET /v1/models: the SDK
// reads it whole to decode it, so an endless body from a broken or hostile
// server would otherwise be allocated whole. A page of the API's 1000
// models at most is a few hundred KiB. A longer body fails the models call
// with a permanent error naming the limit, and its connection is dropped.
const MaxModelsResponse = 8 << 20
