package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/walcast/walcast/pluginkit"
)

// prepare finds the stream, creating it when missing and allowed, checks
// that it stores every table's subject and that its duplicate window is
// at least min_duplicate_window, and marks the sink ready. Errors are
// classified: retryable when JetStream did not answer, permanent when the
// stream must be changed.
func (s *Sink) prepare(ctx context.Context) error {
	st := s.cfg
	stream, err := s.js.Stream(ctx, st.stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		stream, err = s.createStream(ctx)
	}
	if err != nil {
		return s.classify(fmt.Sprintf("look up stream %s", st.stream), err)
	}
	info := stream.CachedInfo()
	window := info.Config.Duplicates
	if window < st.minWindow {
		return pluginkit.Permanent(fmt.Errorf("stream %s keeps message ids for %s (duplicate_window), less than min_duplicate_window (%s): an event walcast delivers again later than that (a retry, a restart) would be stored twice; raise it (nats stream edit %s --dupe-window %s) or lower min_duplicate_window to accept that",
			st.stream, window, st.minWindow, st.stream, st.minWindow))
	}
	if err := s.checkSubjects(ctx); err != nil {
		return err
	}
	s.window, s.ready = window, true
	s.log.Info("nats connected", "stream", st.stream, "duplicate_window", window.String(),
		"messages", info.State.Msgs, "server", redactURL(s.nc.ConnectedUrl()))
	return nil
}

// createStream creates the stream on the prefix's subjects and every
// per-table subject outside them, or says how to create it.
func (s *Sink) createStream(ctx context.Context) (jetstream.Stream, error) {
	st := s.cfg
	subjects := []string{st.subjectPrefix + ".>"}
	for _, subj := range st.subjects {
		if !strings.HasPrefix(subj, st.subjectPrefix+".") {
			subjects = append(subjects, subj)
		}
	}
	if !st.create {
		return nil, pluginkit.Permanent(fmt.Errorf("stream %s does not exist and create_stream is false: create it on subjects %s with a duplicate window of at least %s (nats stream add %s --subjects %q --dupe-window %s), or set create_stream = true",
			st.stream, strings.Join(subjects, " "), st.minWindow, st.stream, strings.Join(subjects, ","), st.minWindow))
	}
	stream, err := s.js.CreateStream(ctx, jetstream.StreamConfig{
		Name:       st.stream,
		Subjects:   subjects,
		Duplicates: st.window,
		Storage:    jetstream.FileStorage,
		Replicas:   st.replicas,
	})
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return s.js.Stream(ctx, st.stream) // created meanwhile by someone else
	}
	if err != nil {
		return nil, fmt.Errorf("create stream %s on %s: %w", st.stream, strings.Join(subjects, " "), err)
	}
	s.log.Info("created stream", "stream", st.stream, "subjects", subjects, "duplicate_window", st.window.String(), "replicas", st.replicas)
	return stream, nil
}

// checkSubjects checks that the stream stores each table's subject: a
// message whose subject no stream or another stream stores would never
// reach this stream's duplicate window.
func (s *Sink) checkSubjects(ctx context.Context) error {
	st := s.cfg
	for _, table := range s.tables {
		schema, name, _ := strings.Cut(table, ".")
		subj := st.subjectFor(schema, name)
		got, err := s.js.StreamNameBySubject(ctx, subj)
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound) || (err == nil && got == ""):
			return pluginkit.Permanent(fmt.Errorf("table %s: stream %s does not store subject %s; add it to the stream's subjects (or set subjects / subject_prefix to match the stream)", table, st.stream, subj))
		case err != nil:
			return s.classify("find the stream of subject "+subj, err)
		case got != st.stream:
			return pluginkit.Permanent(fmt.Errorf("table %s: subject %s is stored by stream %s, not by %s: set stream = %q or change the streams' subjects", table, subj, got, st.stream, got))
		}
	}
	return nil
}
