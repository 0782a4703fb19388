// Package agenttest is a scripted model server on loopback for testing the
// agent loop offline: real HTTP, both APIs the loop speaks (OpenAI-compatible
// POST /v1/chat/completions and Anthropic POST /v1/messages), one scripted
// turn per request, deterministically. The Python SDK's dry_exec.testing is
// its twin.
package agenttest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
)

// Turn is one answer. Calls are tool calls (Args: an object, marshalled, or
// a string sent verbatim: malformed on purpose). Hang never answers (a model
// timeout); Status answers an HTTP error; Raw answers a body that is not the
// API's shape. Tokens is the usage reported (default 10).
type Turn struct {
	Text         string
	Calls        []Call
	Refusal      string
	FinishReason string
	Hang         bool
	Status       int
	Raw          string
	Tokens       int
}

// Call is one tool call of a Turn.
type Call struct {
	Name string
	Args any
}

// Request is what the server got.
type Request struct {
	API  string // "openai" or "anthropic"
	Body map[string]any
}

// LastResult is the last tool result of the request's last turn, decoded.
func (r Request) LastResult() map[string]any {
	msgs, _ := r.Body["messages"].([]any)
	if len(msgs) == 0 {
		return nil
	}
	last, _ := msgs[len(msgs)-1].(map[string]any)
	var text string
	if r.API == "openai" {
		if last["role"] != "tool" {
			return nil
		}
		text, _ = last["content"].(string)
	} else {
		blocks, _ := last["content"].([]any)
		for _, b := range blocks {
			if bm, _ := b.(map[string]any); bm["type"] == "tool_result" {
				text, _ = bm["content"].(string)
			}
		}
	}
	var out map[string]any
	_ = json.Unmarshal([]byte(text), &out)
	return out
}

// Script gives the turn for the n-th request (from 0); ok false: the script
// is spent (the answer is the text "script ended").
type Script func(n int, req Request) (Turn, bool)

// Turns is a fixed script; a func(Request) Turn entry is computed from the request.
func Turns(turns ...any) Script {
	return func(n int, req Request) (Turn, bool) {
		if n >= len(turns) {
			return Turn{}, false
		}
		switch t := turns[n].(type) {
		case Turn:
			return t, true
		case func(Request) Turn:
			return t(req), true
		}
		panic(fmt.Sprintf("agenttest: turn %d is a %T", n, turns[n]))
	}
}

// Server is the scripted model server.
type Server struct {
	*httptest.Server
	Model string
	mu    sync.Mutex
	reqs  []Request
	done  chan struct{}
	once  sync.Once
}

// New starts a server on 127.0.0.1.
func New(script Script) *Server {
	s := &Server{Model: "scripted-model", done: make(chan struct{})}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/models") {
			writeJSON(w, 200, map[string]any{"object": "list", "data": []any{map[string]any{"id": s.Model}}})
			return
		}
		var api string
		switch {
		case strings.HasSuffix(r.URL.Path, "/chat/completions"):
			api = "openai"
		case strings.HasSuffix(r.URL.Path, "/v1/messages"):
			api = "anthropic"
		default:
			writeJSON(w, 404, map[string]any{"error": map[string]any{"message": "no such path " + r.URL.Path}})
			return
		}
		b, _ := io.ReadAll(r.Body)
		var body map[string]any
		if json.Unmarshal(b, &body) != nil {
			writeJSON(w, 400, map[string]any{"error": map[string]any{"message": "not JSON"}})
			return
		}
		req := Request{API: api, Body: body}
		s.mu.Lock()
		n := len(s.reqs)
		s.reqs = append(s.reqs, req)
		s.mu.Unlock()
		t, ok := script(n, req)
		if !ok {
			t = Turn{Text: "script ended"}
		}
		switch {
		case t.Hang:
			select {
			case <-r.Context().Done():
			case <-s.done:
			}
			return
		case t.Status != 0:
			writeJSON(w, t.Status, map[string]any{"error": map[string]any{"message": t.Raw}})
			return
		case t.Raw != "":
			w.WriteHeader(200)
			io.WriteString(w, t.Raw)
			return
		}
		if api == "openai" {
			writeJSON(w, 200, openAI(t, s.Model))
		} else {
			writeJSON(w, 200, anthropic(t, s.Model))
		}
	}))
	return s
}

// Close releases hanging requests, then stops the server.
func (s *Server) Close() {
	s.once.Do(func() { close(s.done) })
	s.Server.Close()
}

// Requests is what the server got so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

// Env is the environment that points the agent at this server.
func (s *Server) Env(api string) map[string]string {
	if api == "anthropic" {
		return map[string]string{"DRYEXEC_AGENT_PROVIDER": "anthropic", "ANTHROPIC_BASE_URL": s.URL,
			"ANTHROPIC_API_KEY": "scripted", "ANTHROPIC_MODEL": s.Model}
	}
	return map[string]string{"DRYEXEC_AGENT_PROVIDER": "openai", "OPENAI_BASE_URL": s.URL + "/v1",
		"OPENAI_API_KEY": "scripted", "OPENAI_MODEL": s.Model}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func tokens(t Turn) int {
	if t.Tokens == 0 {
		return 10
	}
	return t.Tokens
}

func argText(a any) string {
	if s, ok := a.(string); ok {
		return s
	}
	b, _ := json.Marshal(a)
	return string(b)
}

func openAI(t Turn, model string) map[string]any {
	msg := map[string]any{"role": "assistant", "content": nil}
	if t.Text != "" {
		msg["content"] = t.Text
	}
	if t.Refusal != "" {
		msg["refusal"] = t.Refusal
	}
	finish := t.FinishReason
	if len(t.Calls) > 0 {
		var calls []any
		for i, c := range t.Calls {
			calls = append(calls, map[string]any{"id": fmt.Sprintf("call_%d_%s", i, c.Name), "type": "function",
				"function": map[string]any{"name": c.Name, "arguments": argText(c.Args)}})
		}
		msg["tool_calls"] = calls
		if finish == "" {
			finish = "tool_calls"
		}
	}
	if finish == "" {
		finish = "stop"
	}
	return map[string]any{"id": "chatcmpl-scripted", "object": "chat.completion", "model": model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
		"usage":   map[string]any{"prompt_tokens": 0, "completion_tokens": tokens(t), "total_tokens": tokens(t)}}
}

func anthropic(t Turn, model string) map[string]any {
	content := []any{}
	if text := t.Text + t.Refusal; text != "" {
		content = append(content, map[string]any{"type": "text", "text": text})
	}
	for i, c := range t.Calls {
		var input any = c.Args
		if _, isString := c.Args.(string); !isString {
			var m map[string]any
			_ = json.Unmarshal([]byte(argText(c.Args)), &m)
			input = m
		}
		content = append(content, map[string]any{"type": "tool_use", "id": fmt.Sprintf("toolu_%d_%s", i, c.Name), "name": c.Name, "input": input})
	}
	stop := t.FinishReason
	switch {
	case t.Refusal != "":
		stop = "refusal"
	case len(t.Calls) > 0:
		stop = "tool_use"
	case stop == "":
		stop = "end_turn"
	}
	return map[string]any{"id": "msg_scripted", "type": "message", "role": "assistant", "model": model,
		"content": content, "stop_reason": stop, "usage": map[string]any{"input_tokens": 0, "output_tokens": tokens(t)}}
}
