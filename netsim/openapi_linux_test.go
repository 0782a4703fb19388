package netsim_test

import (
	"os"
	"strings"
	"testing"

	"github.com/dryexec/dryexec/netsim"
)

const pyAPI = `import json, sys, urllib.request, urllib.error
def call(method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request("https://pets.example.com/v1" + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        r = urllib.request.urlopen(req, timeout=10); code, out = r.status, r.read()
    except urllib.error.HTTPError as e:
        code, out = e.code, e.read()
    print(method, path, code, out.decode())
call("GET", "/pets?limit=3")
call("POST", "/pets", {"name": "rex", "tag": "dog"})
call("GET", "/pets/12")
call("PUT", "/pets/12", {"name": "max"})
call("DELETE", "/pets/12")
call("GET", "/owners/0b0e8a3c-4e6f-4c1a-9a57-3f0c2e1d9b11/pets")
call("POST", "/pets", {"name": 5})
`

// TestOpenAPIInSandbox: an OpenAPI document served as a mock over HTTPS:
// every operation answers from inside the sandbox, and an invalid body is
// answered 400 and logged with schema_breach.
func TestOpenAPIInSandbox(t *testing.T) {
	spec, err := os.ReadFile("mock/testdata/petstore.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sim := newSim(t, netsim.Config{Seed: 3}, map[string]string{
		"petstore.yaml": string(spec),
		"mocks.yaml":    "openapi:\n  - spec: petstore.yaml\n",
	})
	res := runSandbox(t, sim, sandboxOpts{env: trustEnv}, "/usr/bin/python3", "-c", pyAPI)
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	want := []string{"GET /pets?limit=3 200 [", "POST /pets 201 {", "GET /pets/12 200 {", "PUT /pets/12 200 {", "DELETE /pets/12 204", "GET /owners/0b0e8a3c-4e6f-4c1a-9a57-3f0c2e1d9b11/pets 200 {\"ownerId\":\"0b0e8a3c", "POST /pets 400 {"}
	if len(lines) != len(want) {
		t.Fatalf("stdout %q stderr %s", res.stdout, res.stderr)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("line %d: %q, want prefix %q", i, lines[i], w)
		}
	}
	var breaches, mocked int
	for _, e := range sim.Log() {
		if e.Proto != "https" {
			continue
		}
		if e.Action != netsim.ActionMocked {
			t.Errorf("not mocked: %+v", e)
		}
		mocked++
		if e.SchemaBreach {
			breaches++
			if e.Status != 400 || e.Method != "POST" || !strings.Contains(e.Reason, "createPet") {
				t.Errorf("breach event %+v", e)
			}
		}
	}
	if mocked != 7 || breaches != 1 {
		t.Fatalf("%d mocked, %d breaches: %s", mocked, breaches, dumpLog(t, sim.Log()))
	}
}
