#!/usr/bin/env python3
"""Checks that each layer of src/ includes only the layers its library links.

A layer is a folder src/<layer>/ built as the static library weave_<layer>; its
CMakeLists.txt names the layers it links (target_link_libraries(weave_<layer> PUBLIC ...)).
Every `#include "<other>/..."` in src/<layer>/ must name the layer itself or one it links,
directly or through the layers it links. Prints each include that breaks this, with
file:line, and exits 1; exits 0 with a one-line summary otherwise. Also fails on a cycle.

Usage: check_layers.py [SRC_DIR]   (default: the src/ beside this script's tests/ folder)
"""
import os
import re
import sys


def link_graph(src):
    graph = {}
    for layer in sorted(os.listdir(src)):
        cmake = os.path.join(src, layer, 'CMakeLists.txt')
        if not os.path.isfile(cmake):
            continue
        text = open(cmake).read()
        deps = set()
        for m in re.finditer(r'target_link_libraries\(\s*weave_%s\b([^)]*)\)' % layer, text):
            deps |= set(re.findall(r'\bweave_([a-z_]+)', m.group(1)))
        graph[layer] = deps
    return graph


def closure(graph, layer, seen=None, path=()):
    if layer in path:
        raise ValueError('link cycle: ' + ' -> '.join(path + (layer,)))
    out = set()
    for dep in graph.get(layer, ()):
        out.add(dep)
        out |= closure(graph, dep, seen, path + (layer,))
    return out


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, '..', '..', 'src')
    graph = link_graph(src)
    if not graph:
        print('check_layers: no layers found under %s' % src)
        return 1
    bad = []
    files = 0
    for layer in sorted(graph):
        try:
            allowed = closure(graph, layer) | {layer}
        except ValueError as e:
            print('check_layers: %s' % e)
            return 1
        folder = os.path.join(src, layer)
        for name in sorted(os.listdir(folder)):
            if not name.endswith(('.h', '.cc')):
                continue
            files += 1
            path = os.path.join(folder, name)
            for n, line in enumerate(open(path), 1):
                m = re.match(r'\s*#include\s+"([a-z_]+)/', line)
                if m and m.group(1) in graph and m.group(1) not in allowed:
                    bad.append('%s:%d: %s includes %s, which weave_%s does not link (links: %s)'
                               % (os.path.relpath(path, os.path.join(src, '..')), n, layer,
                                  m.group(1), layer, ', '.join(sorted(allowed - {layer})) or
                                  'nothing'))
    for b in bad:
        print(b)
    if bad:
        print('check_layers: %d include(s) go against the link graph' % len(bad))
        return 1
    print('check_layers: %d layers, %d files: every include follows the link graph'
          % (len(graph), files))
    return 0


if __name__ == '__main__':
    sys.exit(main())
