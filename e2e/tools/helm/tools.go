package helmbin
