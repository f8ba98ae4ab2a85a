package kwokbin
