package simulated

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nodeforge/nodeforge/test/testobj"
)

// TestNewClientsSendTheirOwnUserAgent writes and reads through the clients
// against a server that records each request: both send UserAgent, and a
// read through kube is answered by the cache, not the server.
func TestNewClientsSendTheirOwnUserAgent(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.Path+" "+r.UserAgent())
		mu.Unlock()
		cm := corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Name: "sim-i-1", Namespace: "nodeforge"}}
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			_ = json.Unmarshal(body, &cm)
			w.WriteHeader(http.StatusCreated)
		}
		_ = json.NewEncoder(w).Encode(cm)
	}))
	defer srv.Close()
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(corev1.SchemeGroupVersion.WithKind("ConfigMap"), meta.RESTScopeNamespace)
	mapper.Add(corev1.SchemeGroupVersion.WithKind("Node"), meta.RESTScopeRoot)
	cache := testobj.Client(testobj.Node("sim-i-1").Obj())
	cfg := &rest.Config{Host: srv.URL, UserAgent: "nodeforge-provisioner"}

	kube, api, err := NewClients(cfg, cache, clientgoscheme.Scheme, mapper)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := kube.Get(ctx, client.ObjectKey{Name: "sim-i-1"}, &corev1.Node{}); err != nil {
		t.Fatalf("reading the node from the cache: %v", err)
	}
	if err := kube.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "sim-i-1", Namespace: "nodeforge"}}); err != nil {
		t.Fatal(err)
	}
	if err := api.Get(ctx, client.ObjectKey{Namespace: "nodeforge", Name: "sim-i-1"}, &corev1.ConfigMap{}); err != nil {
		t.Fatal(err)
	}

	want := []string{
		"POST /api/v1/namespaces/nodeforge/configmaps " + UserAgent,
		"GET /api/v1/namespaces/nodeforge/configmaps/sim-i-1 " + UserAgent,
	}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("requests (-want,+got):\n%s", diff)
	}
	if cfg.UserAgent != "nodeforge-provisioner" {
		t.Errorf("the provisioner's config changed: user agent %q", cfg.UserAgent)
	}
}
