package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/phonellm/phonellm/internal/httpx"
)

// Bounds on what a replica may send back to a probe.
const (
	maxHealthBody  = 64 << 10
	maxModelsBody  = 1 << 20
	maxModels      = 256
	maxMetricsBody = 1 << 20
)

// healthLoop probes one replica until it is removed or the gateway closes.
func (g *Gateway) healthLoop(r *replica) {
	defer g.wg.Done()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-g.ctx.Done():
			return
		case <-r.stop:
			return
		case <-r.kick:
		case <-t.C:
		}
		g.probe(r)
		t.Reset(g.pool.nextProbe(r, time.Now()))
	}
}

// probe checks GET /health, and when it passes learns the slots (from /health or /metrics) and refreshes the
// model list from /v1/models.
func (g *Gateway) probe(r *replica) {
	start := time.Now()
	needSlots, needModels := g.pool.probeInfo(r, start)
	body, err := g.fetch(r, "/health", maxHealthBody)
	if err != nil {
		g.pool.probed(r, start, false, 0, nil, err.Error())
		return
	}
	slots := healthSlots(body)
	if needSlots && slots == 0 {
		if mb, err := g.fetch(r, "/metrics", maxMetricsBody); err == nil {
			slots = metricSlots(mb)
		}
	}
	var models []modelEntry
	if needModels {
		if mb, err := g.fetch(r, "/v1/models", maxModelsBody); err == nil {
			models = parseModels(mb)
		} else {
			g.o.Logger.Debug("replica models", "replica", r.conf().Name, "error", err)
		}
	}
	g.pool.probed(r, start, true, slots, models, "")
}

// fetch GETs path on the replica and returns the body of a 200 answer, at most limit bytes.
func (g *Gateway) fetch(r *replica, path string, limit int64) ([]byte, error) {
	ctx, cancel := context.WithTimeout(g.ctx, g.o.HealthTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.conf().URL+path, nil)
	if err != nil {
		return nil, err
	}
	if r.conf().APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+r.conf().APIKey)
	}
	resp, err := g.health.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, unwrapURLError(err))
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: status %d", path, resp.StatusCode)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("GET %s: answer larger than %d bytes", path, limit)
	}
	return b, nil
}

// healthSlots reads the slot count from a /health answer: phonellm's runtime says slots_idle and
// slots_processing, the phone entrypoint says slots. 0 means not said.
func healthSlots(b []byte) int {
	var h struct {
		Slots      *int `json:"slots"`
		Idle       *int `json:"slots_idle"`
		Processing *int `json:"slots_processing"`
	}
	if json.Unmarshal(b, &h) != nil {
		return 0
	}
	n := 0
	switch {
	case h.Slots != nil:
		n = *h.Slots
	case h.Idle != nil && h.Processing != nil:
		n = *h.Idle + *h.Processing
	}
	if n < 0 || n > 1024 {
		return 0
	}
	return n
}

// metricSlots reads phonellm_slots_total from Prometheus text; 0 when absent.
func metricSlots(b []byte) int {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok || name != "phonellm_slots_total" {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil || f < 1 || f > 1024 {
			return 0
		}
		return int(f)
	}
	return 0
}

// parseModels reads an OpenAI model list, keeping each model's id, created and owned_by. It returns an empty
// (non-nil) list for an unreadable answer, so the replica still counts as having been asked.
func parseModels(b []byte) []modelEntry {
	var l struct {
		Data []json.RawMessage `json:"data"`
	}
	out := []modelEntry{}
	if json.Unmarshal(b, &l) != nil {
		return out
	}
	for _, raw := range l.Data {
		if len(out) == maxModels {
			break
		}
		var m struct {
			ID      string `json:"id"`
			Created int64  `json:"created"`
			OwnedBy string `json:"owned_by"`
		}
		if json.Unmarshal(raw, &m) != nil || m.ID == "" || len(m.ID) > 256 || !utf8.ValidString(m.ID) {
			continue
		}
		if len(m.OwnedBy) > 256 || !utf8.ValidString(m.OwnedBy) {
			m.OwnedBy = ""
		}
		out = append(out, modelEntry{id: m.ID, created: m.Created, ownedBy: m.OwnedBy})
	}
	return out
}

// modelObject is OpenAI's model object, as the gateway lists it.
type modelObject struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

func (m modelEntry) object() modelObject {
	return modelObject{ID: m.id, Object: "model", Created: m.created, OwnedBy: m.ownedBy}
}

// serveHealth answers 200 while at least one replica is live, 503 otherwise, with the summed capacity.
func (g *Gateway) serveHealth(w http.ResponseWriter, r *http.Request) {
	live, total, slots, idle, queued := g.pool.capacity(time.Now())
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	status := "ok"
	if live == 0 {
		status = "unavailable"
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"status": status, "replicas": total, "replicas_live": live,
		"slots": slots, "slots_idle": idle, "slots_processing": slots - idle, "queued": queued})
}

// serveModels lists the models of the live replicas.
func (g *Gateway) serveModels(w http.ResponseWriter, r *http.Request) {
	ms := g.liveModels()
	data := make([]modelObject, 0, len(ms))
	for _, m := range ms {
		data = append(data, m.object())
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data})
}

func (g *Gateway) serveModel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	for _, m := range g.liveModels() {
		if m.id == id {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(m.object())
			return
		}
	}
	httpx.WriteError(w, httpx.NewError(http.StatusNotFound, httpx.TypeInvalidRequest, "model_not_found", "model",
		"The model %q does not exist.", httpx.CapText(id, 256)))
}
