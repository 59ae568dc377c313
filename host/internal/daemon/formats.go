package daemon

import (
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walcast/walcast/host/internal/config"
	"github.com/walcast/walcast/host/internal/source/decode"
)

// formatVersion is what the debezium format writes in source.version.
const formatVersion = "walcast"

// sinkFormats lists the output formats the pipeline's sinks chose besides
// the envelope, each once however many sinks share it (the decoder writes
// each format in use once per event), and for each sink the queue format
// index: 0 for the envelope, i for formats[i-1]. A sequin format names
// its sink (metadata.consumer), so it is never shared.
func sinkFormats(p *config.Pipeline) (formats []decode.Format, index []int, err error) {
	index = make([]int, len(p.Sinks))
	var src *pgconn.Config
	for i, s := range p.Sinks {
		if s.Format == config.FormatWalcast || s.Format == "" {
			continue
		}
		if src == nil {
			if src, err = pgconn.ParseConfig(p.Source.DSN); err != nil {
				return nil, nil, fmt.Errorf("read the database name for sink %s's %s format from the source dsn: %w", s.ID, s.Format, err)
			}
		}
		f := decode.Format{Name: decode.FormatDebezium, Debezium: decode.DebeziumOptions{
			Name:     s.Debezium.Name,
			Database: src.Database,
			Version:  formatVersion,
			Schemas:  s.Debezium.Schemas,
			Decimal:  s.Debezium.DecimalHandling,
		}}
		switch s.Format {
		case config.FormatSequin:
			// metadata.consumer names the sink: a format of its own.
			f = decode.Format{Name: decode.FormatSequin, Sequin: decode.SequinOptions{
				Consumer: s.ID, Database: src.Database, Hostname: src.Host,
			}}
		case config.FormatCloudEvents:
			f = decode.Format{Name: decode.FormatCloudEvents, CloudEvents: decode.CloudEventsOptions{
				Source:     decode.CloudEventsSource(p.Name, src.Database),
				TypePrefix: s.CloudEvents.TypePrefix,
			}}
		}
		at := slices.Index(formats, f)
		if at < 0 {
			formats = append(formats, f)
			at = len(formats) - 1
		}
		index[i] = at + 1
	}
	return formats, index, decode.CheckFormats(formats)
}
