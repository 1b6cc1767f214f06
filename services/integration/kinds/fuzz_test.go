package kinds

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	admissionv1 "k8s.io/api/admission/v1"

	"github.com/sluice-dev/sluice/internal/jobframework"
)

// FuzzEveryKindsWebhook sends every kind's webhook any object, on create
// and on update (against any old object), wrapped in an admission review
// of that kind. No kind may panic; each answers 200 with a response to the
// same request (allowed with a well-formed JSON patch, or refused with a
// message), or refuses the review itself with a 4xx and a message.
func FuzzEveryKindsWebhook(f *testing.F) {
	labelled := func(kind, apiVersion, spec string) string {
		return fmt.Sprintf(`{"kind":%q,"apiVersion":%q,"metadata":{"name":"j","namespace":"team-a","uid":"u","labels":{"sluice.dev/queue-name":"lq"}},"spec":%s}`,
			kind, apiVersion, spec)
	}
	for i, ad := range All {
		k := ad.Kind()
		obj := labelled(k.GVK.Kind, k.GVK.GroupVersion().String(), `{}`)
		f.Add(uint8(i), "CREATE", []byte(obj), []byte(`null`))
		f.Add(uint8(i), "UPDATE", []byte(obj), []byte(labelled(k.GVK.Kind, k.GVK.GroupVersion().String(), `{"suspend":true}`)))
		f.Add(uint8(i), "CREATE", []byte(labelled(k.GVK.Kind, k.GVK.GroupVersion().String(), `{"replicas":-1,"template":{"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":"1E"}}}]}}}`)), []byte(`null`))
	}
	f.Add(uint8(0), "DELETE", []byte(`{}`), []byte(`{}`))
	f.Add(uint8(9), "UPDATE", []byte(`"not an object"`), []byte(`[]`))

	w, err := jobframework.NewWebhook(All, jobframework.WithAddress("127.0.0.1:0"), jobframework.WithLogger(zerolog.New(io.Discard)))
	if err != nil {
		f.Fatal(err)
	}
	h := w.Handler()
	f.Fuzz(func(t *testing.T, which uint8, op string, object, old []byte) {
		k := All[int(which)%len(All)].Kind()
		if !json.Valid(object) || !json.Valid(old) {
			return // the review itself would not parse; FuzzWebhookReview covers bodies
		}
		opJSON, _ := json.Marshal(op)
		body := fmt.Sprintf(`{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"u1","kind":{"group":%q,"version":%q,"kind":%q},`+
			`"resource":{"group":%q,"version":%q,"resource":%q},"namespace":"team-a","name":"j","operation":%s,"object":%s,"oldObject":%s}}`,
			k.GVK.Group, k.GVK.Version, k.GVK.Kind, k.GVK.Group, k.GVK.Version, k.Resource, opJSON, object, old)
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, jobframework.MutatePath(k), strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			if rec.Code < 400 || rec.Code >= 500 || strings.TrimSpace(rec.Body.String()) == "" {
				t.Fatalf("%s: status %d with body %q: want a 4xx with a message", k.Name, rec.Code, rec.Body)
			}
			return
		}
		var got admissionv1.AdmissionReview
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || got.Response == nil {
			t.Fatalf("%s: 200 without an AdmissionReview response: %v: %s", k.Name, err, rec.Body)
		}
		r := got.Response
		if r.UID != "u1" {
			t.Fatalf("%s: response uid %q for request u1", k.Name, r.UID)
		}
		if !r.Allowed && (r.Result == nil || r.Result.Message == "") {
			t.Fatalf("%s: refused without a message: %+v", k.Name, r)
		}
		if len(r.Patch) > 0 {
			var ops []map[string]any
			if err := json.Unmarshal(r.Patch, &ops); err != nil {
				t.Fatalf("%s: patch is not a JSON patch: %v: %s", k.Name, err, r.Patch)
			}
		}
	})
}
