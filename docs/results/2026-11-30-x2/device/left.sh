#!/bin/bash
# Seconds left until $1 seconds after JOB_START (minimum 30).
l=$(( JOB_START + $1 - $(date +%s) )); [ $l -lt 30 ] && l=30; echo $l
