package job

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	admissionv1 "k8s.io/api/admission/v1"

	"github.com/sluice-dev/sluice/internal/jobframework"
)

// FuzzWebhookReview sends the suspend webhook any body as an admission
// review. It must never panic; it answers 200 with a response to the same
// request (allowed with a well-formed JSON patch, or refused with a
// message), or refuses the review itself with a 4xx and a message.
func FuzzWebhookReview(f *testing.F) {
	job := `{"kind":"Job","apiVersion":"batch/v1","metadata":{"name":"j","namespace":"team-a","labels":{"sluice.dev/queue-name":"lq"},"annotations":{"sluice.dev/admission":"{}"}},` +
		`"spec":{"parallelism":2,"template":{"spec":{"restartPolicy":"Never","containers":[{"name":"c","image":"busybox","resources":{"requests":{"cpu":"1"}}}]}}}}`
	review := func(op, object string) []byte {
		return []byte(`{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"u1","kind":{"group":"batch","version":"v1","kind":"Job"},` +
			`"resource":{"group":"batch","version":"v1","resource":"jobs"},"namespace":"team-a","name":"j","operation":"` + op + `","object":` + object + `}}`)
	}
	f.Add(review("CREATE", job))
	f.Add(review("UPDATE", job))
	f.Add(review("CREATE", `{"kind":"Job","apiVersion":"batch/v1","metadata":{"name":"j"},"spec":{"parallelism":-1}}`))
	f.Add(review("CREATE", `null`))
	f.Add([]byte(`{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1"}`))

	w, err := jobframework.NewWebhook([]jobframework.Adapter{Adapter{}}, jobframework.WithAddress("127.0.0.1:0"), jobframework.WithLogger(zerolog.New(io.Discard)))
	if err != nil {
		f.Fatal(err)
	}
	h := w.Handler()
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, jobframework.MutatePath(Kind), strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			if rec.Code < 400 || rec.Code >= 500 || strings.TrimSpace(rec.Body.String()) == "" {
				t.Fatalf("status %d with body %q: want a 4xx with a message", rec.Code, rec.Body)
			}
			return
		}
		var sent, got admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &sent); err != nil || sent.Request == nil {
			t.Fatalf("200 for a body that is no admission review: %v", err)
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || got.Response == nil {
			t.Fatalf("200 without an AdmissionReview response: %v: %s", err, rec.Body)
		}
		r := got.Response
		if r.UID != sent.Request.UID {
			t.Fatalf("response uid %q for request %q", r.UID, sent.Request.UID)
		}
		if !r.Allowed && (r.Result == nil || r.Result.Message == "") {
			t.Fatalf("refused without a message: %+v", r)
		}
		if len(r.Patch) > 0 {
			var ops []map[string]any
			if err := json.Unmarshal(r.Patch, &ops); err != nil {
				t.Fatalf("patch is not a JSON patch: %v: %s", err, r.Patch)
			}
		}
	})
}
