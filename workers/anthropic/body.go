package anthropic

import (
	"io"
	"net/http"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2/option"
)

// maxErrorResponse bounds what is read of a response with an error status.
// The SDK reads such a body whole to build its error: a broken or hostile
// gateway answering with an endless body would otherwise make the process
// allocate all of it. The API's error bodies are a few hundred bytes.
const maxErrorResponse = 64 << 10

// capErrorBody is an SDK middleware that cuts the body of every response
// without a 2xx status at [maxErrorResponse] bytes: past it the body reads
// as ended (a cut JSON error is kept as raw text and classified by its
// status), and closing it drops the connection rather than draining the
// rest.
func capErrorBody(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	res, err := next(req)
	if res != nil && res.Body != nil && (res.StatusCode < 200 || res.StatusCode > 299) {
		res.Body = &cappedBody{r: io.LimitReader(res.Body, maxErrorResponse), c: res.Body}
	}
	return res, err
}

// cappedBody reads at most a limit of a body and closes the whole.
type cappedBody struct {
	r io.Reader
	c io.Closer
}

func (b *cappedBody) Read(p []byte) (int, error) { return b.r.Read(p) }
func (b *cappedBody) Close() error               { return b.c.Close() }

// idleBody is a stream's body whose idle timer fires when one read waits
// longer than the idle timeout for a byte. The timer runs only inside
// Read, so time the reading goroutine spends blocked on a slow channel
// reader is not the server's silence, and any byte (an SSE comment, a
// ping) is not silence either. One goroutine reads at a time.
type idleBody struct {
	rc      io.ReadCloser
	idle    *time.Timer
	timeout time.Duration
}

func (b *idleBody) Read(p []byte) (int, error) {
	b.idle.Reset(b.timeout)
	n, err := b.rc.Read(p)
	b.idle.Stop()
	return n, err
}

func (b *idleBody) Close() error { return b.rc.Close() }
