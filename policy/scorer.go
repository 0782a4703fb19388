package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/dryexec/dryexec"
)

// maxScorerAnswer bounds what is read from a scorer: a score is a few bytes,
// and a broken scorer must not make dryexec buffer without end.
const maxScorerAnswer = 64 << 10

// scorer is a checked Scorer.
type scorer struct {
	cfg     Scorer
	timeout time.Duration
	client  *http.Client
}

func newScorer(s Scorer) (*scorer, error) {
	switch {
	case len(s.Command) > 0 && s.URL != "":
		return nil, fmt.Errorf("%w: scorer: set command or url, not both", ErrInvalid)
	case len(s.Command) == 0 && s.URL == "":
		return nil, fmt.Errorf("%w: scorer: set command or url", ErrInvalid)
	case len(s.Command) > 0 && s.Command[0] == "":
		return nil, fmt.Errorf("%w: scorer: command[0] is empty", ErrInvalid)
	case s.TimeoutMS < 0:
		return nil, fmt.Errorf("%w: scorer: timeout_ms is negative", ErrInvalid)
	case s.DeterministicWeight < 0 || s.ExternalWeight < 0 || math.IsNaN(s.DeterministicWeight) || math.IsNaN(s.ExternalWeight):
		return nil, fmt.Errorf("%w: scorer: weights must be ≥ 0", ErrInvalid)
	}
	if s.URL != "" {
		u, err := url.Parse(s.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("%w: scorer: url %q is not an http(s) URL", ErrInvalid, s.URL)
		}
	}
	t := time.Duration(s.TimeoutMS) * time.Millisecond
	if t == 0 {
		t = DefaultScorerTimeoutMS * time.Millisecond
	}
	// No redirects: the delta (commands, paths, output) goes to the endpoint
	// the policy names and nowhere else.
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &scorer{cfg: s, timeout: t, client: c}, nil
}

func (s *scorer) weights() (float64, float64) {
	if s.cfg.DeterministicWeight == 0 && s.cfg.ExternalWeight == 0 {
		return 0.4, 0.6
	}
	return s.cfg.DeterministicWeight, s.cfg.ExternalWeight
}

// consult sends d to the scorer and returns its score.
func (s *scorer) consult(ctx context.Context, d *dryexec.StateDelta) (float64, error) {
	body, err := json.Marshal(d)
	if err != nil {
		return 0, fmt.Errorf("encoding the delta: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var answer []byte
	if s.cfg.URL != "" {
		answer, err = s.post(ctx, body)
	} else {
		answer, err = s.run(ctx, body)
	}
	if err != nil {
		if ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return 0, fmt.Errorf("timed out after %s", s.timeout)
		}
		return 0, err
	}
	return parseScore(answer)
}

func (s *scorer) post(ctx context.Context, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.cfg.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxScorerAnswer+1))
	if err != nil {
		return nil, fmt.Errorf("%s: reading the answer: %w", s.cfg.URL, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered %s", s.cfg.URL, resp.Status)
	}
	if len(b) > maxScorerAnswer {
		return nil, fmt.Errorf("%s: answer larger than %d bytes", s.cfg.URL, maxScorerAnswer)
	}
	return b, nil
}

func (s *scorer) run(ctx context.Context, body []byte) ([]byte, error) {
	cmd := exec.CommandContext(ctx, s.cfg.Command[0], s.cfg.Command[1:]...)
	cmd.Stdin = bytes.NewReader(body)
	var out, errb limitedBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	// A scorer that leaves a child holding its stdout must not hold dryexec.
	cmd.WaitDelay = 200 * time.Millisecond
	killGroup(cmd)
	err := cmd.Run()
	if err != nil {
		if msg := strings.TrimSpace(errb.String()); msg != "" {
			return nil, fmt.Errorf("%s: %w: %s", s.cfg.Command[0], err, firstLine(msg))
		}
		return nil, fmt.Errorf("%s: %w", s.cfg.Command[0], err)
	}
	if out.over {
		return nil, fmt.Errorf("%s: answer larger than %d bytes", s.cfg.Command[0], maxScorerAnswer)
	}
	return out.Bytes(), nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// limitedBuffer keeps the first maxScorerAnswer bytes and notes the rest.
type limitedBuffer struct {
	bytes.Buffer
	over bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := maxScorerAnswer - b.Len(); len(p) > room {
		b.over = true
		if room > 0 {
			b.Buffer.Write(p[:room])
		}
		return len(p), nil
	}
	return b.Buffer.Write(p)
}

// parseScore reads "0.7" or {"score": 0.7}; the score must be in [0,1].
func parseScore(b []byte) (float64, error) {
	t := strings.TrimSpace(string(b))
	var f float64
	if strings.HasPrefix(t, "{") {
		var v struct {
			Score *float64 `json:"score"`
		}
		if err := json.Unmarshal([]byte(t), &v); err != nil || v.Score == nil {
			return 0, fmt.Errorf("answer %q is not {\"score\": N}", firstLine(t))
		}
		f = *v.Score
	} else {
		var err error
		if f, err = strconv.ParseFloat(t, 64); err != nil {
			return 0, fmt.Errorf("answer %q is not a number", firstLine(t))
		}
	}
	if math.IsNaN(f) || f < 0 || f > 1 {
		return 0, fmt.Errorf("score %v is outside [0,1]", f)
	}
	return f, nil
}
