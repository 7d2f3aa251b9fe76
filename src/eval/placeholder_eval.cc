// Layer placeholder; removed once the layer has real sources.
