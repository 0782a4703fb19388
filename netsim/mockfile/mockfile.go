// Package mockfile owns reading a netsim file: the mocks and allow rules of
// --net mock:FILE (YAML or JSON; docs/network.md), for netsim itself and for
// the parent of its role process, which reads the credentials the file's
// allow rules inject (package netsim/netproc). It is apart from package
// netconf so that netconf links no YAML decoder.
package mockfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/dryexec/dryexec/netsim/mock"
	"github.com/dryexec/dryexec/netsim/netconf"
)

// File is a netsim file: mocks plus allow rules (YAML or JSON).
type File struct {
	mock.Spec `yaml:",inline"`
	Allow     []netconf.Rule `yaml:"allow" json:"allow"`
}

// Load reads the netsim file at path; unknown fields are refused. Every
// error wraps netconf.ErrBadConfig.
func Load(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: reading mock file: %w", netconf.ErrBadConfig, err)
	}
	var f File
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: %s: %v", netconf.ErrBadConfig, path, err)
	}
	return &f, nil
}

// Rules returns every allow rule c holds: Allow, then its mock file's,
// checked as netsim.New checks them. A front end calls it to judge the
// rules before a sandbox starts (a mock file that cannot be read or a rule
// that is malformed is an ErrBadConfig here too).
func Rules(c *netconf.Config) ([]netconf.Rule, error) {
	out := append([]netconf.Rule(nil), c.Allow...)
	if c.MockFile != "" {
		f, err := Load(c.MockFile)
		if err != nil {
			return nil, err
		}
		out = append(out, f.Allow...)
	}
	for _, r := range out {
		if err := netconf.CheckRule(r); err != nil {
			return nil, fmt.Errorf("%w: allow rule %q: %v", netconf.ErrBadConfig, r.Host, err)
		}
	}
	return out, nil
}

// MocksOpenAPI reports whether c's mock file names OpenAPI documents: only a
// program given a Config.OpenAPI serves those (netproc starts a role binary
// that links them only for such a file).
func MocksOpenAPI(c *netconf.Config) (bool, error) {
	if c.MockFile == "" {
		return false, nil
	}
	f, err := Load(c.MockFile)
	if err != nil {
		return false, err
	}
	return len(f.OpenAPI) > 0, nil
}
