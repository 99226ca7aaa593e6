# ObjectCache gateway image: builds the TypeScript, then runs `objectcache serve` as a non-root user.
FROM node:24.21-bookworm-slim AS build
WORKDIR /app
# A C compiler for native/*.c (bounded receive buffers for streamed chunk reads; a faster CRC-32C).
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev && rm -rf /var/lib/apt/lists/*
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json ./
COPY cli ./cli
COPY gateway ./gateway
COPY http-range ./http-range
COPY client ./client
COPY schemas ./schemas
COPY sigv4 ./sigv4
COPY bench ./bench
COPY test/helpers/minio.ts ./test/helpers/minio.ts
COPY native ./native
COPY scripts/build-native.mjs ./scripts/
RUN npx tsc -p tsconfig.json && node scripts/build-native.mjs && npm prune --omit=dev

FROM node:24.21-bookworm-slim
ENV NODE_ENV=production
WORKDIR /app
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY --from=build /app/package.json ./package.json
COPY schemas/descriptor.schema.json schemas/wire-format.md ./schemas/
USER node
EXPOSE 9080 9081
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:9081/readyz').then(r => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
ENTRYPOINT ["node", "dist/cli/main.js"]
CMD ["serve", "--host", "0.0.0.0", "--metrics-host", "0.0.0.0"]
