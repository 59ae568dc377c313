module github.com/walcast/walcast/pluginkit/cdc

go 1.22
