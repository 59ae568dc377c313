// Package config loads pipeline files and checks them.
//
// A pipeline file names the pipeline, one PostgreSQL source and any number
// of sinks (see pipeline.hcl.example at the repository root). It is checked
// in three steps, each reporting every problem it finds as an
// hcl.Diagnostic with the file, line and column to fix:
//
//  1. Parse (or Load) decodes the file and checks everything that needs
//     neither the database nor the plugins: structure, names, defaults,
//     delivery limits, filters. env("NAME") is the only function.
//  2. DecodeSinkConfig checks a sink's `config` block against the
//     attributes its plugin declares (pluginkit.Info.Config) and turns it
//     into the JSON the plugin's Configure receives. The block is kept as
//     an hcl.Body until then because only the plugin knows its schema.
//  3. Check runs step 2 for every sink and asks each plugin whether it
//     accepts its config, pointing a *pluginkit.ConfigError at the
//     attribute it names.
//
// FormatDiagnostics prints the result one problem per line,
// FILE:LINE:COL: error: message: detail.
//
// The package only reads configuration: it connects to nothing and starts
// no process; plugins are reached through the PluginChecker the caller
// passes to Check.
package config
