from reward_servers.react.server import main

if __name__ == "__main__":
    main()
