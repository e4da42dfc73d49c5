#!/bin/bash
# Print the metrics of verl's "step:N - k:v - ..." console lines that match a regex, one per line.
#   bash .gpu/bin/steplines.sh LOG REGEX
grep -E "step:[0-9]+ - " "$1" | sed -E 's/ - /\n/g' | grep -E "^step:|$2"
