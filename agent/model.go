package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Model endpoints the environment can name (docs/agent.md). A DRYEXEC_
// name wins over the ecosystem's usual one.
const (
	OpenAIDefaultBase     = "https://api.openai.com/v1"
	AnthropicDefaultBase  = "https://api.anthropic.com"
	OpenAIDefaultModel    = "gpt-4o-mini"
	AnthropicDefaultModel = "claude-sonnet-4-5"
	AnthropicVersion      = "2023-06-01"
	// DefaultModelTimeout bounds one model request.
	DefaultModelTimeout = 120 * time.Second
	// maxAnswer bounds what is read of one answer: a broken endpoint must
	// not make the loop buffer without end.
	maxAnswer = 8 << 20
)

// ModelVariables says which variables configure a model; ErrNoModel's
// messages end with it.
const ModelVariables = "set OPENAI_BASE_URL (an OpenAI-compatible endpoint: llama.cpp, vLLM, Ollama, …) and/or " +
	"OPENAI_API_KEY (and OPENAI_MODEL), or ANTHROPIC_API_KEY (and ANTHROPIC_MODEL); DRYEXEC_-prefixed names " +
	"(DRYEXEC_OPENAI_BASE_URL, …) win over them, DRYEXEC_AGENT_PROVIDER=openai|anthropic chooses when both are set"

// ErrNoModel: no model endpoint is configured, or its configuration is
// unusable. The message says which variables to set.
var ErrNoModel = errors.New("no usable model configured")

// ModelConfig says where the agent's model is.
type ModelConfig struct {
	Provider string // "openai" (any OpenAI-compatible endpoint) or "anthropic"
	BaseURL  string
	Model    string // empty with a local OpenAI-compatible server: the first it lists, else OpenAIDefaultModel
	APIKey   string
	Timeout  time.Duration
	// MaxOutputTokens asked for per request (default 2048).
	MaxOutputTokens int
}

// ConfigFromEnv reads the model's configuration from getenv (docs/agent.md).
func ConfigFromEnv(getenv func(string) string) (ModelConfig, error) {
	get := func(names ...string) string {
		for _, n := range names {
			if v := strings.TrimSpace(getenv(n)); v != "" {
				return v
			}
		}
		return ""
	}
	provider := strings.ToLower(get("DRYEXEC_AGENT_PROVIDER"))
	oBase := get("DRYEXEC_OPENAI_BASE_URL", "OPENAI_BASE_URL", "OPENAI_API_BASE")
	oKey := get("DRYEXEC_OPENAI_API_KEY", "OPENAI_API_KEY")
	aKey := get("DRYEXEC_ANTHROPIC_API_KEY", "ANTHROPIC_API_KEY")
	aBase := get("DRYEXEC_ANTHROPIC_BASE_URL", "ANTHROPIC_BASE_URL")
	timeout := DefaultModelTimeout
	if v := get("DRYEXEC_MODEL_TIMEOUT"); v != "" {
		s, err := strconv.ParseFloat(v, 64)
		if err != nil || !(s > 0) {
			return ModelConfig{}, fmt.Errorf("%w: DRYEXEC_MODEL_TIMEOUT=%q: want a positive number of seconds", ErrNoModel, v)
		}
		timeout = time.Duration(s * float64(time.Second))
	}
	switch provider {
	case "":
		switch {
		case oBase != "" || oKey != "":
			provider = "openai"
		case aKey != "" || aBase != "":
			provider = "anthropic"
		default:
			return ModelConfig{}, fmt.Errorf("%w: the agent loop needs a model and none is configured: %s", ErrNoModel, ModelVariables)
		}
	case "openai", "anthropic":
	default:
		return ModelConfig{}, fmt.Errorf("%w: DRYEXEC_AGENT_PROVIDER=%q: want openai or anthropic", ErrNoModel, provider)
	}
	var c ModelConfig
	if provider == "openai" {
		base := oBase
		if base == "" {
			base = OpenAIDefaultBase
		}
		if base == OpenAIDefaultBase && oKey == "" {
			return c, fmt.Errorf("%w: the hosted OpenAI API needs a key: set OPENAI_API_KEY (or DRYEXEC_OPENAI_API_KEY), or point OPENAI_BASE_URL at a local endpoint", ErrNoModel)
		}
		model := get("DRYEXEC_MODEL", "DRYEXEC_OPENAI_MODEL", "OPENAI_MODEL")
		if model == "" && base == OpenAIDefaultBase {
			model = OpenAIDefaultModel
		}
		c = ModelConfig{Provider: "openai", BaseURL: base, Model: model, APIKey: oKey, Timeout: timeout}
	} else {
		if aKey == "" {
			return c, fmt.Errorf("%w: the Anthropic API needs a key: set ANTHROPIC_API_KEY (or DRYEXEC_ANTHROPIC_API_KEY)", ErrNoModel)
		}
		base := aBase
		if base == "" {
			base = AnthropicDefaultBase
		}
		model := get("DRYEXEC_MODEL", "DRYEXEC_ANTHROPIC_MODEL", "ANTHROPIC_MODEL")
		if model == "" {
			model = AnthropicDefaultModel
		}
		c = ModelConfig{Provider: "anthropic", BaseURL: base, Model: model, APIKey: aKey, Timeout: timeout}
	}
	if u, err := url.Parse(c.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return c, fmt.Errorf("%w: %s base URL %q: want an http:// or https:// URL", ErrNoModel, c.Provider, c.BaseURL)
	}
	return c, nil
}

// NewModel returns the client of c's provider.
func NewModel(c ModelConfig) (Model, error) {
	if c.Timeout <= 0 {
		c.Timeout = DefaultModelTimeout
	}
	if c.MaxOutputTokens <= 0 {
		c.MaxOutputTokens = 2048
	}
	// No redirects: the conversation (commands, outputs, paths) goes to the
	// endpoint configured and nowhere else.
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	switch c.Provider {
	case "openai":
		return &openAI{cfg: c, hc: hc}, nil
	case "anthropic":
		return &anthropic{cfg: c, hc: hc}, nil
	}
	return nil, fmt.Errorf("%w: provider %q: want openai or anthropic", ErrNoModel, c.Provider)
}

// Message is one turn of the conversation, whatever the API.
type Message struct {
	Role       string // "user", "assistant" or "tool"
	Text       string
	ToolCalls  []ToolCall // assistant
	ToolCallID string     // tool
	IsError    bool       // tool
}

// ToolCall is a call the model asked for. Arguments is the JSON text as the
// model sent it (it may be malformed).
type ToolCall struct {
	ID, Name, Arguments string
}

// Tool is a tool offered to the model; Schema is its arguments' JSON schema.
type Tool struct {
	Name, Description string
	Schema            map[string]any
}

// Reply is one answer of the model.
type Reply struct {
	Text       string
	ToolCalls  []ToolCall
	Refusal    string // the model refused (OpenAI's message.refusal, Anthropic's stop_reason "refusal")
	StopReason string
	Tokens     int // as the endpoint reports them, else estimated
}

// Model answers a conversation.
type Model interface {
	Complete(ctx context.Context, system string, msgs []Message, tools []Tool) (Reply, error)
}

// ModelError is a failed model request. Kind is "timeout", "http",
// "unreachable" or "malformed".
type ModelError struct {
	Kind   string
	Status int
	Msg    string
}

func (e *ModelError) Error() string { return e.Msg }

func post(ctx context.Context, hc *http.Client, timeout time.Duration, u string, body any, hdr map[string]string) (map[string]any, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(b))
	if err != nil {
		return nil, &ModelError{Kind: "unreachable", Msg: err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return do(ctx, hc, req, u, timeout)
}

func do(ctx context.Context, hc *http.Client, req *http.Request, u string, timeout time.Duration) (map[string]any, error) {
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, &ModelError{Kind: "timeout", Msg: fmt.Sprintf("%s did not answer within %s", u, timeout.Round(time.Millisecond))}
		}
		return nil, &ModelError{Kind: "unreachable", Msg: fmt.Sprintf("%s is unreachable: %v", u, err)}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		if ctx.Err() != nil {
			return nil, &ModelError{Kind: "timeout", Msg: fmt.Sprintf("%s did not finish its answer within %s", u, timeout.Round(time.Millisecond))}
		}
		return nil, &ModelError{Kind: "unreachable", Msg: fmt.Sprintf("%s: reading the answer: %v", u, err)}
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &ModelError{Kind: "http", Status: resp.StatusCode, Msg: fmt.Sprintf("%s answered HTTP %d: %s", u, resp.StatusCode, clip(strings.TrimSpace(string(raw)), 500))}
	}
	if len(raw) > maxAnswer {
		return nil, &ModelError{Kind: "malformed", Msg: fmt.Sprintf("%s: answer larger than %d bytes", u, maxAnswer)}
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, &ModelError{Kind: "malformed", Msg: fmt.Sprintf("%s: the answer is not JSON: %q", u, clip(string(raw), 200))}
	}
	return out, nil
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// estimate counts tokens an endpoint did not report: ~4 bytes each.
func estimate(v any) int {
	b, _ := json.Marshal(v)
	return len(b)/4 + 1
}

type openAI struct {
	cfg ModelConfig
	hc  *http.Client
}

func (m *openAI) headers() map[string]string {
	if m.cfg.APIKey == "" {
		return nil
	}
	return map[string]string{"Authorization": "Bearer " + m.cfg.APIKey}
}

// model is the configured model, or the first a local server lists: a
// llama.cpp, vLLM or Ollama server serves what it has loaded.
func (m *openAI) model(ctx context.Context) (string, error) {
	if m.cfg.Model != "" {
		return m.cfg.Model, nil
	}
	u := strings.TrimRight(m.cfg.BaseURL, "/") + "/models"
	ctx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", &ModelError{Kind: "unreachable", Msg: err.Error()}
	}
	for k, v := range m.headers() {
		req.Header.Set(k, v)
	}
	// A server that lists none (or has no /models) gets the hosted API's
	// default name: many local servers ignore the name anyway.
	m.cfg.Model = OpenAIDefaultModel
	out, err := do(ctx, m.hc, req, u, m.cfg.Timeout)
	if err != nil {
		return m.cfg.Model, nil
	}
	data, _ := out["data"].([]any)
	if len(data) > 0 {
		if d, ok := data[0].(map[string]any); ok {
			if id, ok := d["id"].(string); ok && id != "" {
				m.cfg.Model = id
			}
		}
	}
	return m.cfg.Model, nil
}

func (m *openAI) Complete(ctx context.Context, system string, msgs []Message, tools []Tool) (Reply, error) {
	model, err := m.model(ctx)
	if err != nil {
		return Reply{}, err
	}
	wire := []map[string]any{{"role": "system", "content": system}}
	for _, msg := range msgs {
		switch msg.Role {
		case "assistant":
			a := map[string]any{"role": "assistant", "content": nilIfEmpty(msg.Text)}
			if len(msg.ToolCalls) > 0 {
				var calls []map[string]any
				for _, c := range msg.ToolCalls {
					calls = append(calls, map[string]any{"id": c.ID, "type": "function",
						"function": map[string]any{"name": c.Name, "arguments": c.Arguments}})
				}
				a["tool_calls"] = calls
			}
			wire = append(wire, a)
		case "tool":
			wire = append(wire, map[string]any{"role": "tool", "tool_call_id": msg.ToolCallID, "content": msg.Text})
		default:
			wire = append(wire, map[string]any{"role": "user", "content": msg.Text})
		}
	}
	var ts []map[string]any
	for _, t := range tools {
		ts = append(ts, map[string]any{"type": "function", "function": map[string]any{
			"name": t.Name, "description": t.Description, "parameters": t.Schema}})
	}
	body := map[string]any{"model": model, "messages": wire, "tools": ts, "max_tokens": m.cfg.MaxOutputTokens}
	u := strings.TrimRight(m.cfg.BaseURL, "/") + "/chat/completions"
	out, err := post(ctx, m.hc, m.cfg.Timeout, u, body, m.headers())
	if err != nil {
		return Reply{}, err
	}
	choices, _ := out["choices"].([]any)
	var choice, msg map[string]any
	if len(choices) > 0 {
		choice, _ = choices[0].(map[string]any)
		msg, _ = choice["message"].(map[string]any)
	}
	if msg == nil {
		b, _ := json.Marshal(out)
		return Reply{}, &ModelError{Kind: "malformed", Msg: fmt.Sprintf("%s: the answer has no choices[0].message: %s", u, clip(string(b), 300))}
	}
	r := Reply{}
	r.Text, _ = msg["content"].(string)
	r.Refusal, _ = msg["refusal"].(string)
	r.StopReason, _ = choice["finish_reason"].(string)
	calls, _ := msg["tool_calls"].([]any)
	for i, c := range calls {
		cm, _ := c.(map[string]any)
		fn, _ := cm["function"].(map[string]any)
		tc := ToolCall{ID: fmt.Sprintf("call_%d", i)}
		if id, ok := cm["id"].(string); ok && id != "" {
			tc.ID = id
		}
		tc.Name, _ = fn["name"].(string)
		switch a := fn["arguments"].(type) {
		case string:
			tc.Arguments = a
		case nil:
		default: // some servers send an object
			b, _ := json.Marshal(a)
			tc.Arguments = string(b)
		}
		r.ToolCalls = append(r.ToolCalls, tc)
	}
	if usage, ok := out["usage"].(map[string]any); ok {
		if n, ok := usage["total_tokens"].(float64); ok {
			r.Tokens = int(n)
		}
	}
	if r.Tokens == 0 {
		r.Tokens = estimate(body) + estimate(msg)
	}
	return r, nil
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

type anthropic struct {
	cfg ModelConfig
	hc  *http.Client
}

func (m *anthropic) Complete(ctx context.Context, system string, msgs []Message, tools []Tool) (Reply, error) {
	var wire []map[string]any
	for _, msg := range msgs {
		switch msg.Role {
		case "assistant":
			var content []map[string]any
			if msg.Text != "" {
				content = append(content, map[string]any{"type": "text", "text": msg.Text})
			}
			for _, c := range msg.ToolCalls {
				var input map[string]any
				if json.Unmarshal([]byte(c.Arguments), &input) != nil || input == nil {
					input = map[string]any{} // a malformed call is answered by its tool_result
				}
				content = append(content, map[string]any{"type": "tool_use", "id": c.ID, "name": c.Name, "input": input})
			}
			if len(content) == 0 {
				content = append(content, map[string]any{"type": "text", "text": "…"})
			}
			wire = append(wire, map[string]any{"role": "assistant", "content": content})
		case "tool":
			block := map[string]any{"type": "tool_result", "tool_use_id": msg.ToolCallID, "content": msg.Text}
			if msg.IsError {
				block["is_error"] = true
			}
			// The results of one turn's calls go in one user message.
			if n := len(wire); n > 0 && wire[n-1]["role"] == "user" {
				if blocks, ok := wire[n-1]["content"].([]map[string]any); ok {
					wire[n-1]["content"] = append(blocks, block)
					continue
				}
			}
			wire = append(wire, map[string]any{"role": "user", "content": []map[string]any{block}})
		default:
			wire = append(wire, map[string]any{"role": "user", "content": msg.Text})
		}
	}
	var ts []map[string]any
	for _, t := range tools {
		ts = append(ts, map[string]any{"name": t.Name, "description": t.Description, "input_schema": t.Schema})
	}
	body := map[string]any{"model": m.cfg.Model, "system": system, "messages": wire, "tools": ts, "max_tokens": m.cfg.MaxOutputTokens}
	u := strings.TrimRight(m.cfg.BaseURL, "/") + "/v1/messages"
	out, err := post(ctx, m.hc, m.cfg.Timeout, u, body, map[string]string{"x-api-key": m.cfg.APIKey, "anthropic-version": AnthropicVersion})
	if err != nil {
		return Reply{}, err
	}
	content, ok := out["content"].([]any)
	if !ok {
		b, _ := json.Marshal(out)
		return Reply{}, &ModelError{Kind: "malformed", Msg: fmt.Sprintf("%s: the answer has no content list: %s", u, clip(string(b), 300))}
	}
	r := Reply{}
	var texts []string
	for i, c := range content {
		b, _ := c.(map[string]any)
		switch b["type"] {
		case "text":
			t, _ := b["text"].(string)
			texts = append(texts, t)
		case "tool_use":
			tc := ToolCall{ID: fmt.Sprintf("toolu_%d", i)}
			if id, ok := b["id"].(string); ok && id != "" {
				tc.ID = id
			}
			tc.Name, _ = b["name"].(string)
			if s, ok := b["input"].(string); ok {
				tc.Arguments = s // not the API's shape: the loop says so to the model
			} else {
				a, _ := json.Marshal(b["input"])
				tc.Arguments = string(a)
			}
			r.ToolCalls = append(r.ToolCalls, tc)
		}
	}
	r.Text = strings.Join(texts, "\n")
	r.StopReason, _ = out["stop_reason"].(string)
	if r.StopReason == "refusal" {
		r.Refusal = r.Text
		if r.Refusal == "" {
			r.Refusal = "refused"
		}
	}
	if usage, ok := out["usage"].(map[string]any); ok {
		in, _ := usage["input_tokens"].(float64)
		o, _ := usage["output_tokens"].(float64)
		r.Tokens = int(in + o)
	}
	if r.Tokens == 0 {
		r.Tokens = estimate(body) + estimate(content)
	}
	return r, nil
}
